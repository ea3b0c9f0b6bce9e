"""Training: the Trainer (trainer) over the C runtime (runtime), optimizers and schedules (optim,
lr_schedules), parameter initialisation (init), running statistics, checkpoints, inference, data."""
