-- The load generator's script of the serving load benchmark
-- (bench/serve_bench.py): every connection POSTs one prebuilt infer request
-- (the binary tensor data extension: JSON header, then the raw tensor bytes)
-- again and again; at the end one line "SERVE_WRK {json}" gives the counts
-- and the exact latency percentiles in microseconds.
--
--   wrk -t 1 -c C -d 5s -s bench/serve_wrk.lua URL -- BODY_FILE HEADER_LENGTH
--
-- HEADER_LENGTH is the JSON header's length in bytes, sent as the
-- Inference-Header-Content-Length header. BODY_FILE "-" GETs the URL instead.

function init(args)
  if args[1] == "-" then  -- a GET of the URL, no body: the HTTP round trip alone
    wrk.method = "GET"
    return
  end
  local f = assert(io.open(args[1], "rb"))
  wrk.body = f:read("*a")
  f:close()
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/octet-stream"
  wrk.headers["Inference-Header-Content-Length"] = args[2]
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'SERVE_WRK {"requests": %d, "duration_us": %d, "bytes": %d, "errors_connect": %d, ' ..
    '"errors_read": %d, "errors_write": %d, "errors_status": %d, "errors_timeout": %d, ' ..
    '"p50_us": %d, "p99_us": %d, "mean_us": %.1f, "max_us": %d}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status,
    e.timeout, latency:percentile(50), latency:percentile(99), latency.mean, latency.max))
end
