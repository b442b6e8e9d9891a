# resnet18 split across two backends: CpuOneDnn runs the convolutions, CpuRef
# the head (the nodes pinned with overrides).  python3 resnet18_split.py [MODEL]
import backplane, numpy as np, sys
sess = backplane.InferenceSession(sys.argv[1] if len(sys.argv) > 1 else "resnet18.onnx", overrides={n: "CpuRef" for n in ("/avgpool/GlobalAveragePool", "/Flatten", "/fc/Gemm")})
(y,) = sess.run(None, {"input": np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)})
print([(p.backend, len(p.nodes)) for p in sess.partitions], sess.backends_used)
print(y.shape, y.argmax(), y[0, :3])
