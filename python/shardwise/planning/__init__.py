"""Planning: the problem handed to the C core (problem), the searches (search, search_scale,
search_memory, tofu/), the simulated objective (objective), cost tables and profiles (costs, profile),
baseline strategies (strategies, describe_strategies) and the minibatch tuner (tune)."""
