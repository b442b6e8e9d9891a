// ort_runner.js — ONNX Runtime side of `make bench`, driven by run_bench.py.
//
// The npm package onnxruntime-node ships ONNX Runtime's CPU library but not
// its C API header, so ONNX Runtime is driven through its Node.js API here.
// Protocol (one line each way, JSON replies), the same as backplane_bench:
//   start-up        -> {"ready": true, "load_ms": <ready_ms + first_ms>,
//                       "ready_ms": <require + session creation>,
//                       "first_ms": <the first run alone>,
//                       "base_rss_kb": <RSS before ONNX Runtime was loaded>,
//                       "ready_rss_kb": <RSS with the session created>,
//                       "base_anon_kb", "ready_anon_kb": the same for RssAnon}
//   "run K"         -> {"times_ms": [...]}      K timed runs
//   "save PATH"     -> {"saved": PATH}          last output as .npy (float32)
//   "quit"          -> exits
// Usage: node ort_runner.js MODULE_DIR MODEL.onnx INPUT.npy THREADS
'use strict';
const fs = require('fs');
const readline = require('readline');

const [moduleDir, modelPath, inputPath, threadsArg] = process.argv.slice(2);
const threads = parseInt(threadsArg, 10);

// Minimal .npy reader/writer (version 1/2/3 headers, little-endian, C order).
function readNpy(path) {
  const buf = fs.readFileSync(path);
  const major = buf[6];
  const headerLen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = (major === 1 ? 10 : 12) + headerLen;
  const header = buf.toString('latin1', major === 1 ? 10 : 12, start);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').map((s) => s.trim()).filter((s) => s.length)
    .map((s) => parseInt(s, 10));
  const bytes = buf.subarray(start);
  const copy = new Uint8Array(bytes.length);
  copy.set(bytes);
  if (descr === '<f4') return { type: 'float32', data: new Float32Array(copy.buffer), shape };
  if (descr === '<i8') return { type: 'int64', data: new BigInt64Array(copy.buffer), shape };
  throw new Error(`unsupported npy dtype ${descr}`);
}

function writeNpy(path, data, shape) {
  let header = `{'descr': '<f4', 'fortran_order': False, 'shape': (${shape.join(', ')}${shape.length === 1 ? ',' : ''}), }`;
  const total = 10 + header.length + 1;
  header += ' '.repeat((64 - (total % 64)) % 64) + '\n';
  const pre = Buffer.alloc(10);
  pre.write('\x93NUMPY', 0, 'latin1');
  pre[6] = 1;
  pre[7] = 0;
  pre.writeUInt16LE(header.length, 8);
  fs.writeFileSync(path, Buffer.concat([pre, Buffer.from(header, 'latin1'),
    Buffer.from(data.buffer, data.byteOffset, data.byteLength)]));
}

// A "kB" line of /proc/self/status (RssAnon: resident private memory), 0 if unknown.
function statusKb(key) {
  const m = new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(fs.readFileSync('/proc/self/status', 'latin1'));
  return m ? parseInt(m[1], 10) : 0;
}

async function main() {
  const input = readNpy(inputPath);
  const baseRssKb = Math.round(process.memoryUsage().rss / 1024);  // before ORT is loaded
  const baseAnonKb = statusKb('RssAnon');
  const t0 = process.hrtime.bigint();
  const ort = require(moduleDir);
  const session = await ort.InferenceSession.create(modelPath, {
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
    // ORT's default: intra-op threads spin-wait after a run. run_bench.py
    // leaves a gap between alternating runs so that spinning has stopped
    // before Backplane runs; BENCH_ORT_SPIN=0 turns it off instead.
    extra: { session: { intra_op: { allow_spinning: process.env.BENCH_ORT_SPIN === '0' ? '0' : '1' } } },
  });
  const sessionMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const readyRssKb = Math.round(process.memoryUsage().rss / 1024);
  const readyAnonKb = statusKb('RssAnon');
  const feeds = { [session.inputNames[0]]: new ort.Tensor(input.type, input.data, input.shape) };
  const outName = session.outputNames[0];
  const firstStart = process.hrtime.bigint();
  let result = await session.run(feeds);
  const firstMs = Number(process.hrtime.bigint() - firstStart) / 1e6;
  const reply = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');
  reply({ ready: true, load_ms: sessionMs + firstMs, ready_ms: sessionMs, first_ms: firstMs,
    base_rss_kb: baseRssKb, ready_rss_kb: readyRssKb,
    base_anon_kb: baseAnonKb, ready_anon_kb: readyAnonKb,
    version: ort.env.versions ? ort.env.versions.common : '' });

  const rl = readline.createInterface({ input: process.stdin });
  for await (const line of rl) {
    const [cmd, arg] = line.trim().split(/\s+/);
    if (cmd === 'run') {
      const times = [];
      for (let i = 0; i < parseInt(arg, 10); ++i) {
        const s = process.hrtime.bigint();
        result = await session.run(feeds);
        times.push(Number(process.hrtime.bigint() - s) / 1e6);
      }
      reply({ times_ms: times });
    } else if (cmd === 'save') {
      const out = result[outName];
      writeNpy(arg, out.data, out.dims);
      reply({ saved: arg });
    } else if (cmd === 'quit') {
      break;
    } else {
      reply({ error: `unknown command '${line}'` });
    }
  }
  process.exit(0);
}

main().catch((e) => {
  process.stderr.write(`ort_runner: ${e.stack || e}\n`);
  process.exit(1);
});
