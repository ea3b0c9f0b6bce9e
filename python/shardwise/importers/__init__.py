"""Importers: PyTorch modules (torch/) and ONNX files (onnx/) into shardwise graphs."""
