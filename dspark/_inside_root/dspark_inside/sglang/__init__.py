"""dspark's tools in SGLang's interpreter: argv_check, witness, sizing, replay_scheduler (compat: per-release
adaptations of the sizing)."""
