// A gRPC client of the Open Inference Protocol written against
// @grpc/grpc-js and @grpc/proto-loader alone, with the service loaded from
// the .proto at run time (no generated code): what a Node application
// talking to `backplane serve` would do. Driven by test_grpc_node.py.
//
//   node grpc_node_client.js TARGET PROTO REQUEST.json OUT_DIR
//
// REQUEST.json: {"model": "tiny", "id": "...", "outputs": ["name", ...],
//   "inputs": [{"name", "datatype", "shape", "file"}]}, each input's bytes in
//   its file (raw, little-endian). Writes OUT_DIR/result.json with what every
//   call answered, and each output's raw bytes to OUT_DIR/output_<i>.bin.
// Exits non-zero on anything unexpected.
'use strict';

const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

function call(client, method, request, deadlineMs = 30000) {
  return new Promise((resolve) => {
    const deadline = new Date(Date.now() + deadlineMs);
    client[method](request, { deadline }, (err, response) => {
      if (err) resolve({ code: err.code, details: err.details });
      else resolve({ code: grpc.status.OK, response });
    });
  });
}

async function main() {
  const [target, protoPath, requestPath, outDir] = process.argv.slice(2);
  if (!outDir) {
    console.error('usage: node grpc_node_client.js TARGET PROTO REQUEST.json OUT_DIR');
    process.exit(2);
  }
  // keepCase: the published field names (raw_input_contents); longs as
  // Numbers: shapes are small.
  const definition = protoLoader.loadSync(protoPath, {
    keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true,
  });
  const inference = grpc.loadPackageDefinition(definition).inference;
  const client = new inference.GRPCInferenceService(
      target, grpc.credentials.createInsecure(),
      { 'grpc.max_receive_message_length': 64 << 20 });

  const spec = JSON.parse(fs.readFileSync(requestPath, 'utf8'));
  const result = {};
  result.live = await call(client, 'ServerLive', {});
  result.ready = await call(client, 'ServerReady', {});
  result.model_ready = await call(client, 'ModelReady', { name: spec.model });
  result.server_metadata = await call(client, 'ServerMetadata', {});
  result.model_metadata = await call(client, 'ModelMetadata', { name: spec.model });
  result.unknown_model = await call(client, 'ModelMetadata', { name: 'no_such_model' });

  const request = {
    model_name: spec.model,
    id: spec.id,
    inputs: spec.inputs.map((i) => ({ name: i.name, datatype: i.datatype, shape: i.shape })),
    outputs: (spec.outputs || []).map((name) => ({ name })),
    raw_input_contents: spec.inputs.map((i) => fs.readFileSync(i.file)),
  };
  const infer = await call(client, 'ModelInfer', request);
  if (infer.code === grpc.status.OK) {
    const raw = infer.response.raw_output_contents;
    infer.response.raw_output_contents = raw.map((bytes, i) => {
      const file = path.join(outDir, `output_${i}.bin`);
      fs.writeFileSync(file, bytes);
      return file;
    });
  }
  result.infer = infer;

  // A wrong request (one byte short) is refused, and the channel still works.
  const short = { ...request, raw_input_contents: request.raw_input_contents.slice() };
  short.raw_input_contents[0] = short.raw_input_contents[0].subarray(1);
  result.short_input = await call(client, 'ModelInfer', short);
  result.after_error = await call(client, 'ModelReady', { name: spec.model });

  fs.writeFileSync(path.join(outDir, 'result.json'), JSON.stringify(result, null, 1));
  client.close();
}

main().catch((err) => {
  console.error(err && err.stack ? err.stack : err);
  process.exit(1);
});
