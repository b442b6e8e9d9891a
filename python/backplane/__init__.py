"""Backplane: run ONNX models and compiled artifacts (.bpk) on pluggable backends.

The API follows onnxruntime.InferenceSession, so moving a program over is
mostly a change of import::

    import backplane
    sess = backplane.InferenceSession("resnet18.onnx")
    (y,) = sess.run(None, {"input": x})

docs/python.md describes every function; the type stubs (__init__.pyi) give
their signatures.
"""
from . import numerics  # noqa: F401
from ._backplane import (  # noqa: F401
    BackendError,
    BackendFile,
    BackendInfo,
    BackendPath,
    CorruptDataError,
    DeviceError,
    Error,
    InferenceSession,
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
