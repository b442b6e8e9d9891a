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
    @property
    def devices(self) -> List[Dict[str, Any]]: ...

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

class GraphOptimizationLevel(int):
    ORT_DISABLE_ALL: GraphOptimizationLevel
    ORT_ENABLE_BASIC: GraphOptimizationLevel
    ORT_ENABLE_EXTENDED: GraphOptimizationLevel
    ORT_ENABLE_LAYOUT: GraphOptimizationLevel
    ORT_ENABLE_ALL: GraphOptimizationLevel

class ExecutionMode(int):
    ORT_SEQUENTIAL: ExecutionMode
    ORT_PARALLEL: ExecutionMode

class ExecutionOrder(int):
    DEFAULT: ExecutionOrder
    PRIORITY_BASED: ExecutionOrder
    MEMORY_EFFICIENT: ExecutionOrder

class SessionOptions:
    """ONNX Runtime's SessionOptions, mapped onto Backplane's options (docs/python.md)."""

    intra_op_num_threads: int
    inter_op_num_threads: int
    graph_optimization_level: GraphOptimizationLevel
    execution_mode: ExecutionMode
    execution_order: ExecutionOrder
    enable_profiling: bool
    profile_file_prefix: str
    log_severity_level: int
    log_verbosity_level: int
    logid: str
    optimized_model_filepath: str
    enable_cpu_mem_arena: bool
    enable_mem_pattern: bool
    enable_mem_reuse: bool
    use_deterministic_compute: bool
    def __init__(self) -> None: ...
    def add_session_config_entry(self, key: str, value: str) -> None: ...
    def get_session_config_entry(self, key: str) -> str: ...
    def add_free_dimension_override_by_name(self, dim_name: str, dim_value: int) -> None: ...
    def add_free_dimension_override_by_denotation(self, dim_denotation: str, dim_value: int) -> None: ...
    def register_custom_ops_library(self, library_path: str) -> None: ...
    def add_initializer(self, name: str, value: Any) -> None: ...
    def add_external_initializers(self, names: Sequence[str], values: Sequence[Any]) -> None: ...

class RunOptions:
    log_severity_level: int
    log_verbosity_level: int
    logid: str
    run_tag: str
    terminate: bool
    only_execute_path_to_fetches: bool
    def __init__(self) -> None: ...
    def add_run_config_entry(self, key: str, value: str) -> None: ...
    def get_run_config_entry(self, key: str) -> str: ...

class ModelMetadata:
    producer_name: str
    producer_version: str
    graph_name: str
    graph_description: str
    domain: str
    description: str
    version: int
    custom_metadata_map: Dict[str, str]

class OrtValue:
    @staticmethod
    def ortvalue_from_numpy(numpy_obj: Any, device_type: str = "cpu", device_id: int = 0) -> OrtValue: ...
    @staticmethod
    def ortvalue_from_shape_and_type(
        shape: Sequence[int], element_type: Any, device_type: str = "cpu", device_id: int = 0
    ) -> OrtValue: ...
    def numpy(self) -> np.ndarray[Any, Any]: ...
    def shape(self) -> List[int]: ...
    def element_type(self) -> Any: ...
    def data_type(self) -> str: ...
    def device_name(self) -> str: ...
    def data_ptr(self) -> int: ...
    def is_tensor(self) -> bool: ...
    def is_tensor_sequence(self) -> bool: ...
    def has_value(self) -> bool: ...
    def update_inplace(self, np_arr: Any) -> None: ...

class IOBinding:
    def bind_cpu_input(self, name: str, arr_on_cpu: Any) -> None: ...
    def bind_input(
        self, name: str, device_type: str, device_id: int, element_type: Any, shape: Sequence[int], buffer_ptr: int
    ) -> None: ...
    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None: ...
    def bind_output(
        self,
        name: str,
        device_type: str = "cpu",
        device_id: int = 0,
        element_type: Any = None,
        shape: Optional[Sequence[int]] = None,
        buffer_ptr: Optional[int] = None,
    ) -> None: ...
    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None: ...
    def clear_binding_inputs(self) -> None: ...
    def clear_binding_outputs(self) -> None: ...
    def synchronize_inputs(self) -> None: ...
    def synchronize_outputs(self) -> None: ...
    def get_outputs(self) -> List[OrtValue]: ...
    def copy_outputs_to_cpu(self) -> List[np.ndarray[Any, Any]]: ...

_Provider = Union[str, Tuple[str, Mapping[str, Any]]]
_RunOptions = Union[RunOptions, Mapping[str, str], None]

class InferenceSession:
    def __init__(
        self,
        path_or_bytes: Union[_Path, bytes, bytearray, memoryview],
        sess_options: Optional[SessionOptions] = None,
        providers: Optional[Sequence[_Provider]] = None,
        provider_options: Optional[Sequence[Mapping[str, Any]]] = None,
        *,
        backends: Optional[Sequence[str]] = ...,
        overrides: Optional[Mapping[str, str]] = ...,
        options: _Options = ...,
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
    def get_overridable_initializers(self) -> List[NodeArg]: ...
    def get_modelmeta(self) -> ModelMetadata: ...
    def get_session_options(self) -> SessionOptions: ...
    def run(
        self,
        output_names: Optional[Sequence[str]],
        input_feed: Mapping[str, Any],
        run_options: _RunOptions = None,
    ) -> List[_Value]: ...
    def run_with_ort_values(
        self, output_names: Optional[Sequence[str]], input_dict_ort_values: Mapping[str, Any],
        run_options: _RunOptions = None,
    ) -> List[OrtValue]: ...
    def io_binding(self) -> IOBinding: ...
    def run_with_iobinding(self, iobinding: IOBinding, run_options: _RunOptions = None) -> None: ...
    def end_profiling(self) -> str: ...
    def get_profiling_start_time_ns(self) -> int: ...
    def get_providers(self) -> List[str]: ...
    def get_provider_options(self) -> Dict[str, Dict[str, str]]: ...
    def set_providers(
        self, providers: Optional[Sequence[_Provider]] = None,
        provider_options: Optional[Sequence[Mapping[str, Any]]] = None,
    ) -> None: ...
    def disable_fallback(self) -> None: ...
    def enable_fallback(self) -> None: ...
    @property
    def backends_used(self) -> List[str]: ...
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

def get_available_providers() -> List[str]: ...
def get_all_providers() -> List[str]: ...
def get_device() -> str: ...
def get_version_string() -> str: ...
def set_default_logger_severity(severity: int) -> None: ...
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
