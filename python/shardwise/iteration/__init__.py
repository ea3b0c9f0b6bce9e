"""Views of the C passes over one training iteration: the task graph (lower), the memory plan
(memory), schedules (schedule), swap plans (swap), the simulator (simulate) and traces (trace)."""
