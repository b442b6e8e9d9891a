"""ONNX Runtime's Python surface over Backplane's, so that a program written for
``onnxruntime`` runs with ``import backplane as ort`` in place of
``import onnxruntime as ort``.

ORT's names map onto Backplane's as docs/python.md ("Coming from ONNX Runtime")
lists: providers name backends, provider options are backend configure keys,
SessionOptions become runtime and model options. What has no meaning here is
accepted only where ignoring it cannot change a result, and refused otherwise
with a message saying what Backplane does instead.
"""
import ctypes
import datetime
import enum
import json
import os
import tempfile
import time
import warnings

import numpy as np

from . import _backplane

# ---------------------------------------------------------------- providers

# ORT's name for the CPU: every registered backend that runs on the host.
CPU_PROVIDER = "CPUExecutionProvider"
# ORT provider names that mean Backplane's OpenCL backend.
_OPENCL_PROVIDERS = ("OpenCLExecutionProvider", "GpuOclExecutionProvider")
# ORT providers with no counterpart here. ORT itself warns and goes on
# without a provider its build lacks; so does this (results are the CPU's).
_ABSENT_PROVIDERS = (
    "CUDAExecutionProvider", "TensorrtExecutionProvider", "ROCMExecutionProvider",
    "MIGraphXExecutionProvider", "DmlExecutionProvider", "CoreMLExecutionProvider",
    "OpenVINOExecutionProvider", "DnnlExecutionProvider", "NnapiExecutionProvider",
    "QNNExecutionProvider", "XnnpackExecutionProvider", "AzureExecutionProvider",
    "CANNExecutionProvider", "ACLExecutionProvider", "ArmNNExecutionProvider",
    "WebGpuExecutionProvider", "VitisAIExecutionProvider", "JsExecutionProvider",
)
# ORT CPU provider options that only tune ORT's own allocator.
_CPU_OPTIONS_WITHOUT_EFFECT = ("use_arena", "arena_extend_strategy")


# RuntimeOptions attributes InferenceSession takes as keywords.
_RUNTIME_KEYS = ("backend_path", "dynamic_backends", "probe_backends", "probe_timeout_ms",
                 "allow_insecure_backend_paths", "trusted_backend_digests",
                 "disabled_static_backends", "threads", "backend_config", "log_level")


def _backend_infos(kwargs):
    """The backends a session made with these keywords would have, by id."""
    runtime = {k: v for k, v in kwargs.items() if k in _RUNTIME_KEYS}
    return {b.id: b for b in _backplane.backends(kwargs.get("options"), **runtime)}


def _is_host_backend(info):
    return all(d["kind"] == "cpu" for d in info.devices)


def get_available_providers():
    """Backplane's backends available here, in the default order (ORT lists its providers)."""
    return _backplane.available_backends()


def get_all_providers():
    """Every provider name InferenceSession accepts: the backends and ORT's names for them."""
    return get_available_providers() + [CPU_PROVIDER, *_OPENCL_PROVIDERS]


def get_version_string():
    return _backplane.__version__


def get_device():
    """"GPU" when a backend runs on a GPU here, else "CPU" (as ORT names its build's device)."""
    for info in _backplane.backends():
        if any(d["kind"] == "gpu" and d["selected"] for d in info.devices):
            return "GPU"
    return "CPU"


def _resolve_providers(providers, provider_options, kwargs):
    """ORT's providers (names, or (name, options) pairs) and provider_options ->
    (backend preference, backend_config, the providers as given, per-provider options)."""
    if isinstance(providers, str):
        raise TypeError("providers must be a list, e.g. ['CPUExecutionProvider']")
    names, given_options = [], []
    for p in providers:
        if isinstance(p, tuple):
            if len(p) != 2 or not isinstance(p[1], dict):
                raise ValueError(f"provider {p!r}: a pair must be (name, {{option: value}})")
            names.append(p[0])
            given_options.append(dict(p[1]))
        else:
            names.append(p)
            given_options.append({})
    if provider_options is not None:
        if any(given_options):
            raise ValueError("give provider options either in providers or in provider_options, not both")
        if len(provider_options) != len(names):
            raise ValueError(f"provider_options has {len(provider_options)} entries for "
                             f"{len(names)} providers: give one dict per provider")
        given_options = [dict(o) for o in provider_options]

    infos = _backend_infos(kwargs)
    backends, config, kept = [], {}, []
    for name, opts in zip(names, given_options):
        if name in infos:
            ids = [name]
            config.setdefault(name, {}).update({str(k): str(v) for k, v in opts.items()})
        elif name == CPU_PROVIDER:
            ids = [i for i, info in infos.items() if _is_host_backend(info)]
            unknown = sorted(set(opts) - set(_CPU_OPTIONS_WITHOUT_EFFECT))
            if unknown:
                raise ValueError(
                    f"{CPU_PROVIDER} options {unknown} have no counterpart in Backplane; give "
                    f"backend settings by backend id instead, e.g. ('CpuOneDnn', {{'layout': 'blocked'}})")
        elif name in _OPENCL_PROVIDERS:
            if "GpuOcl" not in infos:
                raise ValueError(f"provider '{name}' is Backplane's GpuOcl backend, which is not "
                                 f"available here (available: {', '.join(infos)})")
            ids = ["GpuOcl"]
            config.setdefault("GpuOcl", {}).update({str(k): str(v) for k, v in opts.items()})
        elif name in _ABSENT_PROVIDERS:
            warnings.warn(f"provider '{name}' is not available in Backplane; running on "
                          f"{', '.join(infos)} instead", stacklevel=3)
            continue
        else:
            raise ValueError(f"unknown provider '{name}' (available: "
                             f"{', '.join(get_all_providers())})")
        kept.append((name, opts))
        backends += [i for i in ids if i not in backends]
    if not backends:
        raise ValueError(f"none of the providers {names} is available here "
                         f"(available: {', '.join(get_all_providers())})")
    return backends, config, kept


# ---------------------------------------------------------------- options

class GraphOptimizationLevel(enum.IntEnum):
    """Accepted for ORT's programs. Backplane fuses and folds what its backends ask for at
    every level; results stay within the numerics policy either way."""
    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    """Accepted for ORT's programs: Backplane runs one partition at a time, each on all its
    threads, in either mode."""
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(enum.IntEnum):
    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


# Session config entries (SessionOptions.add_session_config_entry) whose only
# effect in ORT is on its own threads, allocator or file format.
_SESSION_ENTRIES_WITHOUT_EFFECT = {
    "session.intra_op.allow_spinning", "session.inter_op.allow_spinning",
    "session.use_env_allocators", "session.disable_prepacking", "session.load_model_format",
    "session.save_model_format", "session.use_ort_model_bytes_directly",
    "session.use_ort_model_bytes_for_initializers", "session.force_spinning_stop",
    "session.intra_op_thread_affinities", "session.dynamic_block_base",
    "session.disable_cpu_ep_fallback",
}
_RUN_ENTRIES_WITHOUT_EFFECT = {
    "memory.enable_memory_arena_shrinkage", "run.disable_synchronize_execution_providers",
}
# ORT's log severity (0 verbose ... 4 fatal) -> Backplane's log level.
_LOG_LEVELS = {0: "debug", 1: "info", 2: "warn", 3: "error", 4: "off"}
_default_log_severity = 2


def set_default_logger_severity(severity):
    """The log level of sessions made afterwards with no SessionOptions saying otherwise."""
    global _default_log_severity
    if severity not in _LOG_LEVELS:
        raise ValueError(f"log severity {severity} is not one of 0 (verbose) to 4 (fatal)")
    _default_log_severity = severity


def _refused(what, instead):
    raise NotImplementedError(f"{what} is not supported by Backplane: {instead}")


class SessionOptions:
    """ORT's SessionOptions: the fields programs set, mapped onto Backplane's options
    (docs/python.md, "Coming from ONNX Runtime")."""

    __slots__ = ("intra_op_num_threads", "inter_op_num_threads", "graph_optimization_level",
                 "execution_mode", "execution_order", "enable_profiling", "profile_file_prefix",
                 "log_severity_level", "log_verbosity_level", "logid", "optimized_model_filepath",
                 "enable_cpu_mem_arena", "enable_mem_pattern", "enable_mem_reuse",
                 "use_deterministic_compute", "_config", "_dim_overrides")

    def __init__(self):
        self.intra_op_num_threads = 0  # 0: Backplane's default
        self.inter_op_num_threads = 0
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.execution_order = ExecutionOrder.DEFAULT
        self.enable_profiling = False
        self.profile_file_prefix = "onnxruntime_profile_"
        self.log_severity_level = _default_log_severity
        self.log_verbosity_level = 0
        self.logid = ""
        self.optimized_model_filepath = ""
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.use_deterministic_compute = False
        self._config = {}
        self._dim_overrides = {}

    def add_session_config_entry(self, key, value):
        if key not in _SESSION_ENTRIES_WITHOUT_EFFECT:
            raise ValueError(f"session config entry '{key}' is not supported by Backplane: it could "
                             f"change results, so it is refused rather than ignored (entries "
                             f"accepted: {', '.join(sorted(_SESSION_ENTRIES_WITHOUT_EFFECT))})")
        self._config[key] = str(value)

    def get_session_config_entry(self, key):
        if key not in self._config:
            raise KeyError(f"session config entry '{key}' is not set")
        return self._config[key]

    def add_free_dimension_override_by_name(self, dim_name, dim_value):
        """Fixes a symbolic dim: the model is specialised for it at load, and a run with
        another size for it fails, as in ORT."""
        self._dim_overrides[str(dim_name)] = int(dim_value)

    def add_free_dimension_override_by_denotation(self, dim_denotation, dim_value):
        _refused("add_free_dimension_override_by_denotation",
                 "Backplane does not read dim denotations; use add_free_dimension_override_by_name")

    def register_custom_ops_library(self, library_path):
        _refused("register_custom_ops_library",
                 "operators come from backends; a backend shared object that claims the "
                 "operator is loaded from the backend path (docs/writing-a-backend.md)")

    def add_initializer(self, name, value):
        _refused("add_initializer", "give the value as an input of the run instead")

    def add_external_initializers(self, names, values):
        _refused("add_external_initializers",
                 "store the weights as ONNX external data beside the model")


class RunOptions:
    """ORT's RunOptions. Logging fields are accepted; `terminate` set before a run makes it
    fail, as in ORT (a run already going is not interrupted)."""

    __slots__ = ("log_severity_level", "log_verbosity_level", "logid", "run_tag", "terminate",
                 "only_execute_path_to_fetches", "_config")

    def __init__(self):
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.run_tag = ""
        self.terminate = False
        self.only_execute_path_to_fetches = False
        self._config = {}

    def add_run_config_entry(self, key, value):
        if key not in _RUN_ENTRIES_WITHOUT_EFFECT:
            raise ValueError(f"run config entry '{key}' is not supported by Backplane: it could "
                             f"change results, so it is refused rather than ignored")
        self._config[key] = str(value)

    def get_run_config_entry(self, key):
        if key not in self._config:
            raise KeyError(f"run config entry '{key}' is not set")
        return self._config[key]


class ModelMetadata:
    """InferenceSession.get_modelmeta(): what the model says about itself."""

    __slots__ = ("producer_name", "producer_version", "graph_name", "graph_description", "domain",
                 "description", "version", "custom_metadata_map")

    def __init__(self, fields):
        for k in self.__slots__:
            setattr(self, k, fields[k])

    def __repr__(self):
        return (f"ModelMetadata(producer_name={self.producer_name!r}, graph_name={self.graph_name!r}, "
                f"version={self.version})")


# ---------------------------------------------------------------- values

_ELEMENT_TYPES = {
    np.dtype(np.float32): "tensor(float)", np.dtype(np.float64): "tensor(double)",
    np.dtype(np.float16): "tensor(float16)", np.dtype(np.int8): "tensor(int8)",
    np.dtype(np.uint8): "tensor(uint8)", np.dtype(np.int16): "tensor(int16)",
    np.dtype(np.uint16): "tensor(uint16)", np.dtype(np.int32): "tensor(int32)",
    np.dtype(np.uint32): "tensor(uint32)", np.dtype(np.int64): "tensor(int64)",
    np.dtype(np.uint64): "tensor(uint64)", np.dtype(np.bool_): "tensor(bool)",
}


def _host_only(device_type, device_id=0):
    if str(device_type).lower() != "cpu":
        raise ValueError(f"device '{device_type}': Backplane's Python values live in host memory "
                         f"('cpu'); a backend on another device copies to it itself")


class OrtValue:
    """A tensor in host memory: a numpy array, shared, not copied (as ORT shares a CPU
    array's memory)."""

    __slots__ = ("_array",)

    def __init__(self, array):
        self._array = array

    @staticmethod
    def ortvalue_from_numpy(numpy_obj, device_type="cpu", device_id=0):
        _host_only(device_type, device_id)
        a = np.asarray(numpy_obj)
        if not a.flags["C_CONTIGUOUS"]:
            a = np.ascontiguousarray(a)
        return OrtValue(a)

    @staticmethod
    def ortvalue_from_shape_and_type(shape, element_type, device_type="cpu", device_id=0):
        _host_only(device_type, device_id)
        return OrtValue(np.zeros(tuple(shape), dtype=element_type))

    def numpy(self):
        return self._array

    def shape(self):
        return list(self._array.shape)

    def element_type(self):
        return self._array.dtype.type

    def data_type(self):
        return _ELEMENT_TYPES.get(self._array.dtype, f"tensor({self._array.dtype})")

    def device_name(self):
        return "cpu"

    def data_ptr(self):
        return self._array.ctypes.data

    def is_tensor(self):
        return True

    def is_tensor_sequence(self):
        return False

    def has_value(self):
        return True

    def update_inplace(self, np_arr):
        np.copyto(self._array, np.asarray(np_arr).reshape(self._array.shape))

    def __repr__(self):
        return f"OrtValue({self.data_type()}, shape={self.shape()})"


def _array_at(buffer_ptr, element_type, shape):
    """A numpy array over memory the caller owns (IOBinding.bind_input/bind_output with
    buffer_ptr), without copying."""
    dt = np.dtype(element_type)
    count = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    raw = (ctypes.c_char * (count * dt.itemsize)).from_address(int(buffer_ptr))
    return np.frombuffer(raw, dtype=dt, count=count).reshape(tuple(shape))


class IOBinding:
    """InferenceSession.io_binding(): inputs and outputs bound ahead of the run. Arrays bound
    as outputs are written in place by run_with_iobinding (no copy)."""

    def __init__(self, session):
        self._session = session
        self._inputs = {}
        self._outputs = []  # (name, array or None)
        self._results = None

    def bind_cpu_input(self, name, arr_on_cpu):
        self._inputs[name] = np.asarray(arr_on_cpu)

    def bind_input(self, name, device_type, device_id, element_type, shape, buffer_ptr):
        _host_only(device_type, device_id)
        self._inputs[name] = _array_at(buffer_ptr, element_type, shape)

    def bind_ortvalue_input(self, name, ortvalue):
        self._inputs[name] = ortvalue.numpy()

    def bind_output(self, name, device_type="cpu", device_id=0, element_type=None, shape=None,
                    buffer_ptr=None):
        _host_only(device_type, device_id)
        if buffer_ptr is None:
            target = None
        elif element_type is None or shape is None:
            raise ValueError(f"bind_output('{name}'): a buffer_ptr needs its element_type and shape")
        else:
            target = _array_at(buffer_ptr, element_type, shape)
            target.flags.writeable = True
        self._set_output(name, target)

    def bind_ortvalue_output(self, name, ortvalue):
        self._set_output(name, ortvalue.numpy())

    def _set_output(self, name, target):
        self._outputs = [(n, a) for n, a in self._outputs if n != name] + [(name, target)]

    def clear_binding_inputs(self):
        self._inputs = {}

    def clear_binding_outputs(self):
        self._outputs = []

    def synchronize_inputs(self):
        pass  # host memory: nothing is in flight

    def synchronize_outputs(self):
        pass

    def get_outputs(self):
        if self._results is None:
            raise RuntimeError("no outputs yet: call run_with_iobinding first")
        return [OrtValue(a) for a in self._results]

    def copy_outputs_to_cpu(self):
        if self._results is None:
            raise RuntimeError("no outputs yet: call run_with_iobinding first")
        return [np.array(a, copy=True) for a in self._results]

    def _run(self, run_options):
        self._results = self._session._core._run_bound(self._inputs, list(self._outputs), run_options)


# ---------------------------------------------------------------- session

def _from_core(name):
    """A read-only attribute of the extension's session, as InferenceSession's own."""
    return property(lambda self: getattr(self._core, name), doc=f"See docs/python.md ({name}).")


class InferenceSession:
    """A loaded model (ONNX or .bpk), run from any number of threads.

    ``InferenceSession(path_or_bytes, sess_options=None, providers=None, provider_options=None,
    **kwargs)`` takes ONNX Runtime's arguments; Backplane's own (backends, overrides, options,
    allow_fallback, input_shapes, method, external_data, max_specializations, warm_up and any
    RuntimeOptions attribute) are keywords. See docs/python.md."""

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None,
                 **kwargs):
        # Positional arguments of the earlier signature (backends, overrides, options).
        if isinstance(sess_options, (list, tuple)):
            kwargs.setdefault("backends", sess_options)
            sess_options = None
        if isinstance(providers, dict):
            kwargs.setdefault("overrides", providers)
            providers = None
        if provider_options is not None and not isinstance(provider_options, (list, tuple)):
            kwargs.setdefault("options", provider_options)
            provider_options = None
        if sess_options is not None and not isinstance(sess_options, SessionOptions):
            raise TypeError("sess_options must be a backplane.SessionOptions (or None)")
        self._path_or_bytes = path_or_bytes
        self._sess_options = sess_options if sess_options is not None else SessionOptions()
        self._kwargs = dict(kwargs)
        self._profile_events = None
        self._profile_start_ns = 0
        self._load(providers, provider_options)

    def _load(self, providers, provider_options):
        kw = dict(self._kwargs)
        so = self._sess_options
        if so.intra_op_num_threads and "threads" not in kw:
            kw["threads"] = int(so.intra_op_num_threads)
        if "log_level" not in kw:
            kw["log_level"] = _LOG_LEVELS.get(so.log_severity_level, "warn")
        self._providers, self._provider_options = None, None
        if providers is not None:
            if "backends" in kw:
                raise ValueError("give providers or backends, not both")
            backends, config, kept = _resolve_providers(providers, provider_options, kw)
            kw["backends"] = backends
            if config:
                merged = dict(kw.get("backend_config", {}))
                for b, opts in config.items():
                    merged[b] = {**merged.get(b, {}), **opts}
                kw["backend_config"] = merged
            self._providers, self._provider_options = kept, providers
        elif provider_options is not None:
            raise ValueError("provider_options needs providers")
        if so._dim_overrides:
            self._core = _backplane.InferenceSession(self._path_or_bytes, **kw)
            shapes = self._overridden_shapes(self._core.get_inputs())
            if shapes and "input_shapes" not in kw:
                kw["input_shapes"] = shapes
                self._core = _backplane.InferenceSession(self._path_or_bytes, **kw)
        else:
            self._core = _backplane.InferenceSession(self._path_or_bytes, **kw)
        if so.enable_profiling:
            self._profile_events = []
            self._profile_start_ns = datetime.datetime.now().timestamp() * 1e9
            self._profile_origin = time.perf_counter_ns()
        if so.optimized_model_filepath:
            self._write_optimized(so.optimized_model_filepath, kw)

    def _overridden_shapes(self, inputs):
        """input_shapes for the inputs whose every open dim a free dimension override fixes."""
        shapes = {}
        for arg in inputs:
            dims = [self._sess_options._dim_overrides.get(d, d) if isinstance(d, str) else d
                    for d in arg.shape]
            if all(isinstance(d, int) for d in dims):
                shapes[arg.name] = dims
        return shapes

    def _write_optimized(self, path, kw):
        """optimized_model_filepath: Backplane's optimised form is a compiled artifact (.bpk),
        which InferenceSession loads like the .onnx."""
        model = self._path_or_bytes
        tmp = None
        if isinstance(model, (bytes, bytearray, memoryview)):
            tmp = tempfile.NamedTemporaryFile(suffix=".onnx", delete=False)
            tmp.write(bytes(model))
            tmp.close()
            model = tmp.name
        try:
            ckw = {k: kw[k] for k in ("backends", "overrides", "options", "allow_fallback", "input_shapes")
                   if k in kw}
            rt = {k: v for k, v in kw.items() if k in ("threads", "backend_config", "log_level")}
            _backplane.compile([os.fspath(model)], os.fspath(path), **ckw, **rt)
        finally:
            if tmp is not None:
                os.unlink(tmp.name)

    # -- ORT's methods

    def get_inputs(self):
        return self._core.get_inputs()

    def get_outputs(self):
        return self._core.get_outputs()

    def get_overridable_initializers(self):
        return []

    def get_modelmeta(self):
        return ModelMetadata(self._core._metadata())

    def get_session_options(self):
        return self._sess_options

    def get_providers(self):
        """The providers the session was made with, as named (as ONNX Runtime reports its
        registered providers; those skipped for want of a counterpart are not listed);
        without providers, the backends the plan uses, in order of first use."""
        if self._providers is None:
            return self._core.get_providers()
        return [name for name, _ in self._providers]

    def get_provider_options(self):
        if self._providers is None:
            return {b: {} for b in self._core.backends_used}
        return {name: {str(k): str(v) for k, v in opts.items()} for name, opts in self._providers}

    def set_providers(self, providers=None, provider_options=None):
        """Loads the model again over these providers, as ORT re-creates its session."""
        self._load(providers, provider_options)

    def disable_fallback(self):
        """Accepted: Backplane never moves a run to another backend after a failure."""

    def enable_fallback(self):
        """Accepted: Backplane never moves a run to another backend after a failure."""

    def _run_options(self, run_options):
        """RunOptions (or Backplane's dict) -> Backplane's dict, and the trace file of a
        profiled session's run, if any."""
        if run_options is None or isinstance(run_options, dict):
            opts = dict(run_options or {})
        elif isinstance(run_options, RunOptions):
            if run_options.terminate:
                raise RuntimeError("Exiting due to terminate flag being set to true.")
            opts = {}
        else:
            raise TypeError("run_options must be a backplane.RunOptions, a dict or None")
        trace = None
        if self._profile_events is not None and "profile" not in opts:
            fd, path = tempfile.mkstemp(suffix=".json")
            os.close(fd)
            opts["profile"] = path
            trace = (path, time.perf_counter_ns())
        return opts, trace

    def _collect_trace(self, trace):
        """Adds a run's trace (its times from the run's start) to the session's,
        moved to when the run started since profiling did."""
        if trace is None:
            return
        path, started = trace
        try:
            with open(path) as f:
                events = json.load(f).get("traceEvents", [])
            shift = (started - self._profile_origin) / 1e3
            for e in events:
                if "ts" in e:
                    e["ts"] += shift
            self._profile_events.extend(events)
        finally:
            os.unlink(path)

    def _check_overrides(self, input_feed):
        overrides = self._sess_options._dim_overrides
        if not overrides:
            return
        for arg in self._core.get_inputs():
            if arg.name not in input_feed:
                continue
            shape = np.shape(input_feed[arg.name])
            for d, dim in enumerate(arg.shape):
                if isinstance(dim, str) and dim in overrides and d < len(shape) and shape[d] != overrides[dim]:
                    raise _backplane.InvalidArgumentError(
                        f"input '{arg.name}' dim {d} ('{dim}') is {shape[d]}, but the session "
                        f"options fix '{dim}' at {overrides[dim]}")

    def run(self, output_names, input_feed, run_options=None):
        self._check_overrides(input_feed)
        opts, trace = self._run_options(run_options)
        try:
            return self._core.run(output_names, input_feed, opts or None)
        finally:
            self._collect_trace(trace)

    def run_with_ort_values(self, output_names, input_dict_ort_values, run_options=None):
        feeds = {k: v.numpy() if isinstance(v, OrtValue) else v for k, v in input_dict_ort_values.items()}
        return [OrtValue(np.asarray(a)) for a in self.run(output_names, feeds, run_options)]

    def io_binding(self):
        return IOBinding(self)

    def run_with_iobinding(self, iobinding, run_options=None):
        self._check_overrides(iobinding._inputs)
        opts, trace = self._run_options(run_options)
        try:
            iobinding._run(opts or None)
        finally:
            self._collect_trace(trace)

    def end_profiling(self):
        """Writes the trace of every run since the session was made (SessionOptions.enable_profiling)
        to <profile_file_prefix>_<date>_<time>.json, as ORT names it, and returns that name;
        "" when profiling is off."""
        if self._profile_events is None:
            return ""
        stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        path = f"{self._sess_options.profile_file_prefix}_{stamp}.json"
        seen, events = set(), []
        for e in self._profile_events:
            if e.get("ph") == "M":  # process and thread names: once each
                key = (e.get("name"), e.get("tid"), json.dumps(e.get("args"), sort_keys=True))
                if key in seen:
                    continue
                seen.add(key)
            events.append(e)
        with open(path, "w") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)
        self._profile_events = None
        return path

    def get_profiling_start_time_ns(self):
        return int(self._profile_start_ns)

    # -- Backplane's own members

    backends_used = _from_core("backends_used")
    partitions = _from_core("partitions")
    notes = _from_core("notes")
    runs_in_stages = _from_core("runs_in_stages")
    specialization_stats = _from_core("specialization_stats")
    last_profile = _from_core("last_profile")
    model_path = _from_core("model_path")

    def describe_plan(self, format="text"):
        return self._core.describe_plan(format)

    def _pooled_sessions(self):
        return self._core._pooled_sessions()

    def __repr__(self):
        return repr(self._core)
