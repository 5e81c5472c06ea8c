"""Edge deployment: ONNX export (prefill and decode-step graphs), ONNX Runtime, INT8.

Needs the ``export`` extra (onnx, onnxruntime, onnxscript)."""

from psattn.export.graphs import DecodeStepGraph, PrefillGraph, check_exportable
from psattn.export.onnx import OnnxLM, OnnxPaths, export_onnx, nonstandard_ops, quantize_int8

__all__ = ["DecodeStepGraph", "OnnxLM", "OnnxPaths", "PrefillGraph", "check_exportable", "export_onnx",
           "nonstandard_ops", "quantize_int8"]
