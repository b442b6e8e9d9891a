# Type stubs of the backplane package (the extension backplane._backplane).
# python/tests/test_api.py checks that they name exactly what the module has.
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

__version__: str

_Path = Union[str, "os.PathLike[str]"]
_Dim = Union[int, str, None]
_Shape = Sequence[int]

class Error(Exception):
    """Base of every error Backplane raises; str(e) is the message the CLI prints."""

class InvalidArgumentError(Error, ValueError):
    code: str
class UnsupportedError(Error):
    code: str
class UnimplementedError(Error, NotImplementedError):
    code: str
class OutOfMemoryError(Error, MemoryError):
    code: str
class NotFoundError(Error, LookupError):
    code: str
class CorruptDataError(Error):
    code: str
class VersionMismatchError(Error):
    code: str
class DeviceError(Error):
    code: str
class InternalError(Error):
    code: str
class IoError(Error, OSError):
    code: str
class BackendError(Error):
    code: str

class RuntimeOptions:
    """How a runtime finds and loads backends. Every attribute is also a
    keyword argument of InferenceSession, compile, validate, available_backends,
    backend_files, backends and backend_paths."""

    backend_path: Optional[str]
    dynamic_backends: bool
    probe_backends: bool
    probe_timeout_ms: int
    allow_insecure_backend_paths: bool
    trusted_backend_digests: List[str]
    disabled_static_backends: List[str]
    threads: int
    # {"CpuOneDnn": {"layout": "blocked"}}: each key reaches that backend's
    # configure; an unknown backend or key is an error.
    backend_config: Dict[str, Dict[str, str]]
    log_level: str
    def __init__(
        self,
        *,
        backend_path: Optional[_Path] = ...,
        dynamic_backends: bool = ...,
        probe_backends: bool = ...,
        probe_timeout_ms: int = ...,
        allow_insecure_backend_paths: bool = ...,
        trusted_backend_digests: List[str] = ...,
        disabled_static_backends: List[str] = ...,
        threads: int = ...,
        backend_config: Dict[str, Dict[str, str]] = ...,
        log_level: str = ...,
    ) -> None: ...

_Options = Union[RuntimeOptions, Mapping[str, Any], None]

class NodeArg:
    """An input or output: name, numpy dtype (None if known only at run
    time), shape (ints; a symbolic dim as its name; None if unknown)."""

    @property
    def name(self) -> str: ...
    @property
    def dtype(self) -> Optional[np.dtype[Any]]: ...
    @property
    def shape(self) -> List[_Dim]: ...
    @property
    def type(self) -> str: ...
    @property
    def kind(self) -> str: ...

class Partition:
    @property
    def backend(self) -> str: ...
    @property
    def nodes(self) -> List[str]: ...
    @property
    def inputs(self) -> List[str]: ...
    @property
    def outputs(self) -> List[str]: ...
    @property
    def imperative(self) -> bool: ...
    @property
    def polymorphic(self) -> bool: ...

class BackendInfo:
    @property
    def id(self) -> str: ...
    @property
    def vendor(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def api_version(self) -> str: ...
    @property
    def source(self) -> str: ...

class BackendFile:
    @property
    def path(self) -> str: ...
    @property
    def canonical_path(self) -> str: ...
    @property
    def id(self) -> str: ...
    @property
    def file_version(self) -> str: ...
    @property
    def api_version(self) -> str: ...
    @property
    def score(self) -> int: ...
    @property
    def fate(self) -> str: ...
    @property
    def step(self) -> str: ...
    @property
    def reason(self) -> str: ...

class BackendPath:
    @property
    def path(self) -> str: ...
    @property
    def used(self) -> bool: ...
    @property
    def reason(self) -> str: ...

_Value = Union[np.ndarray[Any, Any], List[np.ndarray[Any, Any]], None]

class InferenceSession:
    def __init__(
        self,
        path_or_bytes: Union[_Path, bytes, bytearray, memoryview],
        backends: Optional[Sequence[str]] = None,
        overrides: Optional[Mapping[str, str]] = None,
        options: _Options = None,
        *,
        allow_fallback: bool = ...,
        input_shapes: Mapping[str, _Shape] = ...,
        method: str = ...,
        external_data: Sequence[_Path] = ...,
        max_specializations: int = ...,
        warm_up: bool = ...,
        **runtime_options: Any,
    ) -> None: ...
    def get_inputs(self) -> List[NodeArg]: ...
    def get_outputs(self) -> List[NodeArg]: ...
    def run(
        self,
        output_names: Optional[Sequence[str]],
        input_feed: Mapping[str, Any],
        run_options: Optional[Mapping[str, str]] = None,
    ) -> List[_Value]: ...
    @property
    def backends_used(self) -> List[str]: ...
    def get_providers(self) -> List[str]: ...
    @property
    def partitions(self) -> List[Partition]: ...
    @property
    def notes(self) -> List[str]: ...
    @property
    def runs_in_stages(self) -> bool: ...
    @property
    def specialization_stats(self) -> Dict[str, Union[int, float]]: ...
    @property
    def last_profile(self) -> Optional[Dict[str, Any]]: ...
    @property
    def model_path(self) -> str: ...
    def describe_plan(self, format: str = "text") -> str: ...

def available_backends(options: _Options = None, **runtime_options: Any) -> List[str]: ...
def backends(options: _Options = None, **runtime_options: Any) -> List[BackendInfo]: ...
def backend_files(options: _Options = None, **runtime_options: Any) -> List[BackendFile]: ...
def backend_paths(options: _Options = None, **runtime_options: Any) -> List[BackendPath]: ...
def compile(
    methods: Sequence[Union[_Path, Tuple[str, _Path]]],
    output: _Path,
    external_data: Optional[_Path] = None,
    backends: Optional[Sequence[str]] = None,
    overrides: Optional[Mapping[str, str]] = None,
    shapes: Optional[Sequence[Mapping[str, _Shape]]] = None,
    shape_polymorphic: bool = True,
    options: _Options = None,
    *,
    allow_fallback: bool = ...,
    input_shapes: Mapping[str, _Shape] = ...,
    **runtime_options: Any,
) -> Dict[str, Any]: ...
def inspect(
    path: _Path, external_data: Optional[Sequence[_Path]] = None, as_text: bool = False
) -> Any: ...
def validate(
    path: _Path,
    inputs: Optional[Mapping[str, Any]] = None,
    backends: Optional[Sequence[str]] = None,
    overrides: Optional[Mapping[str, str]] = None,
    find_node: bool = True,
    options: _Options = None,
    *,
    allow_fallback: bool = ...,
    input_shapes: Mapping[str, _Shape] = ...,
    **runtime_options: Any,
) -> Dict[str, Any]: ...
def max_threads() -> int: ...
