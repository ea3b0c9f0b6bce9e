"""Machines: devices and device graphs with presets (devices), machine files (machine_file), device
sets (device_sets) and the GPUs this process can use (cuda)."""
