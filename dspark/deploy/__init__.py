"""Where a validated plan runs besides one `dspark start` per node: Kubernetes manifests and Ray clusters."""
