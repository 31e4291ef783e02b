"""`switchyard bench tournament`: every policy in every regime (workloads x loads relative to
capacity x engine counts x profiles) in the simulator, with each adaptive policy's regret
against the best fixed one (main.py)."""
