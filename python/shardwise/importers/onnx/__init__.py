"""``sw.from_onnx``: an ONNX file into a shardwise graph (convert), constant folding (const),
external weights (data), op converters (ops, seq) and recurrent layers (rnn)."""
