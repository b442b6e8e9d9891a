// ort_shapes.js — ONNX Runtime side of the dynamic-shape benchmark (issue 13),
// driven by bench/shapes_bench.py. Prints one JSON object on stdout.
//
// Usage: node ort_shapes.js MODULE_DIR THREADS [options]
//   --decoder PATH         decoder_kv.onnx (scripts/gen_models.py): input_ids [1, new],
//                          past_key_L / past_value_L [1, heads, past, head_dim] ->
//                          logits [1, new, vocab], present_key_L / present_value_L
//   --encoder PATH         encoder_dyn.onnx: input_ids [batch, seq] -> last_hidden_state
//   --cache-lengths LIST   per-token latency at these past lengths (default 1,16,64,256)
//   --step-runs N          timed single-token steps per cache length (default 50; median)
//   --gen-tokens N         tokens of the greedy generation (default 256)
//   --gen-runs N           timed generations (default 5; median)
//   --prompt-token ID      the 1-token prompt of the generation (default 1)
//   --encoder-shapes LIST  BATCHxSEQ,... (default 10 mixed shapes, below)
//   --encoder-rounds N     timed rounds over all shapes (default 20)
//   --encoder-vocab N      ids are drawn below this (default 1000)
//   --warmup N             untimed runs before timing (default 5)
//   --save-dir DIR         write each encoder output as encoder_dyn.BxS.ort.npy
//   --kv-dims HxD          heads x head_dim of the cache (default: from the model's metadata)
// Either model may be left out. Options as bench/ort_runner.js: intraOpNumThreads =
// THREADS, one inter-op thread, sequential, all graph optimisations, intra-op spinning
// unless BENCH_ORT_SPIN=0.
//
// Decoder: per cache length L, the feed is one token (id 1) and past_* of length L
// filled with fixed pseudo-random values (latency does not depend on them); each timed
// step is one session.run on that same feed. Generation: the prompt token with an empty
// cache (past = 0), then one token per run, argmax of the last logits, present_* fed
// back as past_*; timed from the first run to the last token, argmax included.
// Encoder: one session; each round runs every shape once in the given order, so
// consecutive runs change shape (what a service with mixed requests sees); the first
// run of each shape (before any warm-up) is reported apart as first_ms.
// Encoder ids: element i (row-major) of a BxS input is (i * 7919 + 13 * S + B) % vocab,
// so other runtimes and PyTorch can feed the same ids.
'use strict';
const fs = require('fs');
const path = require('path');

const DEFAULT_ENCODER_SHAPES = '1x8,1x32,1x64,1x128,1x256,2x16,2x100,4x32,4x64,8x24';

function parseArgs(argv) {
  const [moduleDir, threadsArg, ...rest] = argv;
  if (!moduleDir || !threadsArg) throw new Error('usage: node ort_shapes.js MODULE_DIR THREADS [options]');
  const o = {
    moduleDir, threads: parseInt(threadsArg, 10), decoder: null, encoder: null,
    cacheLengths: [1, 16, 64, 256], stepRuns: 50, genTokens: 256, genRuns: 5, promptToken: 1,
    encoderShapes: DEFAULT_ENCODER_SHAPES, encoderRounds: 20, encoderVocab: 1000, warmup: 5,
    saveDir: null, kvDims: null,
  };
  const int = (flag, v) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0) throw new Error(`${flag}: '${v}' is not a non-negative integer`);
    return n;
  };
  for (let i = 0; i < rest.length; i += 2) {
    const flag = rest[i], v = rest[i + 1];
    if (v === undefined) throw new Error(`${flag}: missing value`);
    switch (flag) {
      case '--decoder': o.decoder = v; break;
      case '--encoder': o.encoder = v; break;
      case '--cache-lengths': o.cacheLengths = v.split(',').filter((s) => s).map((s) => int(flag, s)); break;
      case '--step-runs': o.stepRuns = int(flag, v); break;
      case '--gen-tokens': o.genTokens = int(flag, v); break;
      case '--gen-runs': o.genRuns = int(flag, v); break;
      case '--prompt-token': o.promptToken = int(flag, v); break;
      case '--encoder-shapes': o.encoderShapes = v; break;
      case '--encoder-rounds': o.encoderRounds = int(flag, v); break;
      case '--encoder-vocab': o.encoderVocab = int(flag, v); break;
      case '--warmup': o.warmup = int(flag, v); break;
      case '--save-dir': o.saveDir = v; break;
      case '--kv-dims': o.kvDims = v.split('x').map((s) => int(flag, s)); break;
      default: throw new Error(`unknown option '${flag}'`);
    }
  }
  if (!(o.threads >= 1)) throw new Error(`THREADS: '${threadsArg}' is not a positive integer`);
  if (o.stepRuns < 1 || o.genRuns < 1 || o.encoderRounds < 1 || o.genTokens < 1) {
    throw new Error('--step-runs, --gen-runs, --encoder-rounds and --gen-tokens must be >= 1');
  }
  o.encoderShapes = o.encoderShapes.split(',').filter((s) => s).map((s) => {
    const m = /^(\d+)x(\d+)$/.exec(s);
    if (!m || +m[1] < 1 || +m[2] < 1) throw new Error(`--encoder-shapes: '${s}' is not BATCHxSEQ`);
    return [+m[1], +m[2]];
  });
  return o;
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

const nowMs = () => Number(process.hrtime.bigint()) / 1e6;

// Fixed pseudo-random floats in [-1, 1) (an LCG: no dependence on Math.random).
function filled(n, seed) {
  const a = new Float32Array(n);
  let x = seed >>> 0;
  for (let i = 0; i < n; ++i) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    a[i] = x / 2147483648 - 1;
  }
  return a;
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

function sessionOptions(threads) {
  return {
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
    extra: { session: { intra_op: { allow_spinning: process.env.BENCH_ORT_SPIN === '0' ? '0' : '1' } } },
  };
}

// The decoder's cache layout: names of the past_*/present_* pairs, in the model's
// input order, and [heads, head_dim] from --kv-dims or the input metadata.
function decoderLayout(session, kvDims) {
  const past = session.inputNames.filter((n) => n.startsWith('past_'));
  if (!session.inputNames.includes('input_ids') || past.length === 0) {
    throw new Error(`decoder: expected inputs input_ids and past_*, got ${session.inputNames.join(', ')}`);
  }
  for (const p of past) {
    const present = p.replace(/^past_/, 'present_');
    if (!session.outputNames.includes(present)) throw new Error(`decoder: input '${p}' has no output '${present}'`);
  }
  let dims = kvDims;
  if (!dims) {
    const md = (session.inputMetadata || []).find((m) => m.name === past[0]);
    if (!md || !md.shape || md.shape.length !== 4 || typeof md.shape[1] !== 'number' ||
        typeof md.shape[3] !== 'number') {
      throw new Error(`decoder: no static heads/head_dim in the metadata of '${past[0]}'; pass --kv-dims HxD`);
    }
    dims = [md.shape[1], md.shape[3]];
  }
  return { past, heads: dims[0], headDim: dims[1] };
}

function argmaxLast(logits) {
  const vocab = logits.dims[2];
  const base = (logits.dims[1] - 1) * vocab;
  let best = 0;
  for (let j = 1; j < vocab; ++j) if (logits.data[base + j] > logits.data[base + best]) best = j;
  return best;
}

async function benchDecoder(ort, o) {
  const t0 = nowMs();
  const session = await ort.InferenceSession.create(o.decoder, sessionOptions(o.threads));
  const loadMs = nowMs() - t0;
  const { past, heads, headDim } = decoderLayout(session, o.kvDims);
  const ids = (tokens) => new ort.Tensor('int64', BigInt64Array.from(tokens.map(BigInt)), [1, tokens.length]);

  const perToken = [];
  for (const len of o.cacheLengths) {
    const feeds = { input_ids: ids([1]) };
    past.forEach((name, i) => {
      const data = filled(heads * len * headDim, 1 + i + 16 * len);
      feeds[name] = new ort.Tensor('float32', data, [1, heads, len, headDim]);
    });
    const s0 = nowMs();
    await session.run(feeds);
    const firstMs = nowMs() - s0;
    for (let i = 0; i < o.warmup; ++i) await session.run(feeds);
    const times = [];
    for (let i = 0; i < o.stepRuns; ++i) {
      const s = nowMs();
      await session.run(feeds);
      times.push(nowMs() - s);
    }
    perToken.push({ cache_length: len, median_ms: median(times), min_ms: Math.min(...times), first_ms: firstMs,
      runs: times.length });
  }

  // Greedy generation from one token; the first untimed generation warms up
  // every cache length it goes through.
  const generate = async () => {
    let feeds = { input_ids: ids([o.promptToken]) };
    for (const name of past) feeds[name] = new ort.Tensor('float32', new Float32Array(0), [1, heads, 0, headDim]);
    const tokens = [];
    const s = nowMs();
    for (let step = 0; step < o.genTokens; ++step) {
      const out = await session.run(feeds);
      tokens.push(argmaxLast(out.logits));
      const next = { input_ids: ids([tokens[tokens.length - 1]]) };
      for (const name of past) next[name] = out[name.replace(/^past_/, 'present_')];
      feeds = next;
    }
    return { ms: nowMs() - s, tokens };
  };
  const first = await generate();
  const genTimes = [];
  for (let r = 0; r < o.genRuns; ++r) {
    const g = await generate();
    if (g.tokens.join() !== first.tokens.join()) throw new Error('decoder: two greedy generations differ');
    genTimes.push(g.ms);
  }
  const genMs = median(genTimes);
  return {
    model: o.decoder, load_ms: loadMs, heads, head_dim: headDim, layers: past.length / 2,
    per_token: perToken,
    generation: { prompt_token: o.promptToken, tokens: o.genTokens, total_ms: genMs, per_token_ms: genMs / o.genTokens,
      first_total_ms: first.ms, runs: genTimes.length, generated_ids: first.tokens },
  };
}

function encoderIds(b, s, vocab) {
  const a = new BigInt64Array(b * s);
  for (let i = 0; i < a.length; ++i) a[i] = BigInt((i * 7919 + 13 * s + b) % vocab);
  return a;
}

async function benchEncoder(ort, o) {
  const t0 = nowMs();
  const session = await ort.InferenceSession.create(o.encoder, sessionOptions(o.threads));
  const loadMs = nowMs() - t0;
  const inName = session.inputNames[0], outName = session.outputNames[0];
  const feeds = o.encoderShapes.map(([b, s]) => ({
    [inName]: new ort.Tensor('int64', encoderIds(b, s, o.encoderVocab), [b, s]),
  }));
  const first = [];
  for (let k = 0; k < feeds.length; ++k) {
    const s = nowMs();
    const out = await session.run(feeds[k]);
    first.push(nowMs() - s);
    if (o.saveDir) {
      const [b, sq] = o.encoderShapes[k];
      writeNpy(`${o.saveDir}/encoder_dyn.${b}x${sq}.ort.npy`, out[outName].data, out[outName].dims);
    }
  }
  for (let w = 0; w < o.warmup; ++w) for (const f of feeds) await session.run(f);
  const times = o.encoderShapes.map(() => []);
  for (let r = 0; r < o.encoderRounds; ++r) {
    for (let k = 0; k < feeds.length; ++k) {
      const s = nowMs();
      await session.run(feeds[k]);
      times[k].push(nowMs() - s);
    }
  }
  return {
    model: o.encoder, load_ms: loadMs, vocab: o.encoderVocab, rounds: o.encoderRounds,
    shapes: o.encoderShapes.map(([b, s], k) => ({ batch: b, seq: s, median_ms: median(times[k]),
      min_ms: Math.min(...times[k]), first_ms: first[k], runs: times[k].length })),
    overall_median_ms: median(times.flat()),
  };
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const ort = require(path.resolve(o.moduleDir));  // a relative path is not require()'s
  const result = { runtime: 'onnxruntime', version: ort.env.versions ? ort.env.versions.common : '',
    threads: o.threads, warmup: o.warmup, spinning: process.env.BENCH_ORT_SPIN !== '0' };
  if (o.decoder) result.decoder = await benchDecoder(ort, o);
  if (o.encoder) result.encoder = await benchEncoder(ort, o);
  process.stdout.write(JSON.stringify(result) + '\n');
}

main().catch((e) => {
  process.stderr.write(`ort_shapes: ${e.stack || e}\n`);
  process.exit(1);
});
