"""vLLM: its own KV-cache planner run on a CPU at every point of a domain (`verify engine vllm`)."""
