// ort_run.js — the ONNX Runtime side of the corpus (run_corpus.py).
//
// Usage: node ort_run.js MODULE_DIR MODEL.onnx DIR THREADS RUNS
// DIR holds inputs.json ({"inputs": [{"name", "file"}]}, and optionally
// "optimization": ONNX Runtime's graphOptimizationLevel, default "all", and
// "save_optimized": a path to write the model as its optimiser left it) and
// the .npy files it names. Runs the model once, writes each output to DIR/ort_out_<k>.npy,
// then times RUNS more runs and writes DIR/ort_result.json:
// {"outputs": [{"name", "file"}], "times_ms": [...], "version": "..."}.
'use strict';
const fs = require('fs');
const path = require('path');

const [moduleDir, modelPath, dir, threadsArg, runsArg] = process.argv.slice(2);

// .npy (versions 1 to 3, little-endian, C order) <-> ONNX Runtime tensors.
const NPY_TO_ORT = {
  '<f4': ['float32', Float32Array], '<f8': ['float64', Float64Array],
  '<i8': ['int64', BigInt64Array], '<i4': ['int32', Int32Array],
  '<i2': ['int16', Int16Array], '|i1': ['int8', Int8Array],
  '|u1': ['uint8', Uint8Array], '<u2': ['uint16', Uint16Array],
  '|b1': ['bool', Uint8Array], '<f2': ['float16', Uint16Array],
};
const ORT_TO_NPY = {
  float32: '<f4', float64: '<f8', int64: '<i8', int32: '<i4', int16: '<i2', int8: '|i1',
  uint8: '|u1', uint16: '<u2', bool: '|b1', float16: '<f2',
};

function readNpy(file) {
  const buf = fs.readFileSync(file);
  const major = buf[6];
  const headerLen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = (major === 1 ? 10 : 12) + headerLen;
  const header = buf.toString('latin1', major === 1 ? 10 : 12, start);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  if (/'fortran_order':\s*True/.test(header)) throw new Error(`${file}: Fortran order`);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').map((s) => s.trim())
    .filter((s) => s.length).map((s) => parseInt(s, 10));
  const kind = NPY_TO_ORT[descr];
  if (!kind) throw new Error(`${file}: unsupported npy dtype ${descr}`);
  const bytes = buf.subarray(start);
  const copy = new Uint8Array(bytes.length);
  copy.set(bytes);
  const [type, Ctor] = kind;
  const data = type === 'bool' ? new Uint8Array(copy.buffer) : new Ctor(copy.buffer);
  return { type, data: type === 'bool' ? Array.from(data, (b) => b !== 0) : data, shape };
}

function writeNpy(file, tensor) {
  const descr = ORT_TO_NPY[tensor.type];
  if (!descr) throw new Error(`output of type ${tensor.type} cannot be saved`);
  const shape = tensor.dims;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': (${shape.join(', ')}${shape.length === 1 ? ',' : ''}), }`;
  header += ' '.repeat((64 - ((10 + header.length + 1) % 64)) % 64) + '\n';
  const pre = Buffer.alloc(10);
  pre.write('\x93NUMPY', 0, 'latin1');
  pre[6] = 1;
  pre[7] = 0;
  pre.writeUInt16LE(header.length, 8);
  let data = tensor.data;
  if (tensor.type === 'bool') data = Uint8Array.from(data, (b) => (b ? 1 : 0));
  fs.writeFileSync(file, Buffer.concat([pre, Buffer.from(header, 'latin1'),
    Buffer.from(data.buffer, data.byteOffset, data.byteLength)]));
}

async function main() {
  const ort = require(moduleDir);
  const spec = JSON.parse(fs.readFileSync(path.join(dir, 'inputs.json'), 'utf8'));
  const threads = parseInt(threadsArg, 10);
  const session = await ort.InferenceSession.create(modelPath, {
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: spec.optimization || 'all',
    ...(spec.save_optimized ? { optimizedModelFilePath: spec.save_optimized } : {}),
  });
  const feeds = {};
  for (const input of spec.inputs) {
    const t = readNpy(path.join(dir, input.file));
    feeds[input.name] = new ort.Tensor(t.type, t.data, t.shape);
  }
  const result = await session.run(feeds);
  const outputs = session.outputNames.map((name, k) => {
    const file = `ort_out_${k}.npy`;
    writeNpy(path.join(dir, file), result[name]);
    return { name, file };
  });
  const times = [];
  for (let i = 0; i < parseInt(runsArg, 10); ++i) {
    const s = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - s) / 1e6);
  }
  const version = ort.env && ort.env.versions ? ort.env.versions.common : '';
  fs.writeFileSync(path.join(dir, 'ort_result.json'), JSON.stringify({ outputs, times_ms: times, version }));
}

main().catch((e) => {
  process.stderr.write(`ort_run: ${e.stack || e}\n`);
  process.exit(1);
});
