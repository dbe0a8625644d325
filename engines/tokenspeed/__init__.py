"""tokenspeed: its real recipes (runtime/layers/attention/kv_cache/recipes) planned on a CPU."""
