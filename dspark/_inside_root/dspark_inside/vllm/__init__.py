"""dspark's tools in vLLM's interpreter: argv_check, witness, replay_scheduler (kv_plan: their shared planning)."""
