"""Backplane: run ONNX models and compiled artifacts (.bpk) on pluggable backends.

The API is ONNX Runtime's (InferenceSession, SessionOptions, providers, IO
binding, OrtValue), so a program written for onnxruntime runs with a changed
import::

    import backplane as ort
    sess = ort.InferenceSession("resnet18.onnx", providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"input": x})

docs/python.md describes every function; the type stubs (__init__.pyi) give
their signatures.
"""
from . import numerics  # noqa: F401
from ._ort import (  # noqa: F401
    ExecutionMode,
    ExecutionOrder,
    GraphOptimizationLevel,
    InferenceSession,
    IOBinding,
    ModelMetadata,
    OrtValue,
    RunOptions,
    SessionOptions,
    get_all_providers,
    get_available_providers,
    get_device,
    get_version_string,
    set_default_logger_severity,
)
from ._backplane import (  # noqa: F401
    BackendError,
    BackendFile,
    BackendInfo,
    BackendPath,
    CorruptDataError,
    DeviceError,
    Error,
    InternalError,
    InvalidArgumentError,
    IoError,
    NodeArg,
    NotFoundError,
    OutOfMemoryError,
    Partition,
    RuntimeOptions,
    UnimplementedError,
    UnsupportedError,
    VersionMismatchError,
    __version__,
    available_backends,
    backend_files,
    backend_paths,
    backends,
    compile,
    inspect,
    max_threads,
    validate,
)

__all__ = [
    "ExecutionMode",
    "ExecutionOrder",
    "GraphOptimizationLevel",
    "IOBinding",
    "ModelMetadata",
    "OrtValue",
    "RunOptions",
    "SessionOptions",
    "get_all_providers",
    "get_available_providers",
    "get_device",
    "get_version_string",
    "set_default_logger_severity",
    "BackendError",
    "BackendFile",
    "BackendInfo",
    "BackendPath",
    "CorruptDataError",
    "DeviceError",
    "Error",
    "InferenceSession",
    "InternalError",
    "InvalidArgumentError",
    "IoError",
    "NodeArg",
    "NotFoundError",
    "OutOfMemoryError",
    "Partition",
    "RuntimeOptions",
    "UnimplementedError",
    "UnsupportedError",
    "VersionMismatchError",
    "available_backends",
    "backend_files",
    "backend_paths",
    "backends",
    "compile",
    "inspect",
    "max_threads",
    "validate",
]
