from dspark.cli import main

raise SystemExit(main())
