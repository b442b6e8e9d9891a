#!/usr/bin/python3
"""Generates the model zoo: torchvision 0.14 models users bring (issue 12).

Every model is built from torchvision's own code with seeded random weights
(weights=None, weights_backbone=None, torch.manual_seed; nothing is
downloaded), exported with torch.onnx.export at opset 17, and run in PyTorch
on a seeded input whose outputs are the references. (RoiAlign, in the R-CNN
models, is exported with the coordinate_transformation_mode torchvision 0.14
omits: register_roi_align_opset16.) For each model NAME this
writes, into --out:

  NAME.onnx               the export (dynamic axes where a user sets them:
                          the batch of classifiers, the image size of
                          detectors)
  NAME.input.INPUT.npy    the seeded input(s)
  NAME.expected.OUT.npy   PyTorch's outputs
  NAME.json               how to compare (zoo_compare.py reads it): the
                          family, input/output names, "tensor" or
                          "detection" comparison and the detector's
                          thresholds; and the generation time
  NAME.stamp              hash of this script + torch/torchvision versions;
                          a model is regenerated only when it changes

Sizes. The suite must generate and run in a few minutes on 2 cores with the
reference backend, so every model runs on small inputs and, where torchvision
takes a configuration (ViT, Swin, MaxViT, ConvNeXt, MViT, the detectors'
min_size/max_size), a smaller one: fewer layers, narrower, a smaller image.
The architecture code and so the operators the export emits are torchvision's
own; only sizes differ, each builder below says which.

Random weights. BatchNorm statistics are measured on seeded data (so deep
nets neither explode nor vanish and BN still matters), LayerNorm affine
parameters are random, and detection heads get lower score thresholds and
spread class logits, so that the detectors return real detections to compare.

Usage: gen_zoo.py --out DIR [--models a,b,...] [--list] [--force]
Run with Debian's interpreter (/usr/bin/python3): torch, torchvision, onnx.
"""
import argparse
import copy
import hashlib
import json
import os
import sys
import tempfile
import time
import warnings

import numpy as np
import torch
import torch.nn as nn

OPSET = 17
SEED = 20261123


def _stamp():
    """Read once, at start: a file edited while a run goes on must not lend
    its hash to models the old code generates."""
    import torchvision
    with open(os.path.abspath(__file__), "rb") as f:
        h = hashlib.sha256(f.read())
    h.update(f"{torch.__version__} {torchvision.__version__} opset {OPSET}".encode())
    return h.hexdigest()


# --------------------------------------------------------------------------
# Seeded random weights that keep activations O(1)
# --------------------------------------------------------------------------

def calibrate_batchnorm(model, run_inputs, seed):
    """Measures BatchNorm statistics on seeded data, then perturbs them.

    Only the BN modules are put in training mode (cumulative averages), the
    rest of the model stays in eval mode.
    """
    g = torch.Generator().manual_seed(seed)
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    model.eval()
    with torch.no_grad():
        for bn in bns:
            if bn.affine:
                bn.weight.copy_(0.5 + torch.rand(bn.num_features, generator=g))
                bn.bias.copy_(0.2 * torch.randn(bn.num_features, generator=g))
            bn.reset_running_stats()
            bn.momentum = None
            bn.train()
        for _ in range(2):
            model(*run_inputs(g))
        for bn in bns:
            c = bn.num_features
            bn.running_mean.add_(0.1 * torch.randn(c, generator=g))
            bn.running_var.mul_(0.75 + 0.5 * torch.rand(c, generator=g))
            # A channel almost constant on the calibration data (a dead
            # depthwise filter, a saturated gate) would get a gain of
            # hundreds and turn float32 rounding into visible error, in
            # PyTorch as much as in Backplane: floor its variance.
            bn.running_var.clamp_(min=0.1 * float(bn.running_var.mean()))
            bn.momentum = 0.1
            bn.eval()
    model.eval()


def randomize_layernorm(model, seed):
    """Random affine LayerNorm parameters (a LayerNorm ignoring them would
    otherwise still match: they start as 1 and 0)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm) and m.elementwise_affine:
                m.weight.copy_(0.5 + torch.rand(m.weight.shape, generator=g))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))


def scale_module(module, factor):
    """Multiplies a layer's weights (spreads a head's logits: random heads
    give near-uniform class scores, i.e. near-ties everywhere)."""
    with torch.no_grad():
        for p in module.parameters():
            p.mul_(factor)


def reinit(module, gain=1.0, bias=0.0):
    """He-initialises every conv/linear layer in `module` (times `gain`).

    Detection heads are initialised for training from pretrained backbones:
    std 0.01 weights and a prior bias, so with random weights every anchor
    gets the same score (0.01 in RetinaNet, 0.5 objectness in the RPN) and
    the same box. The detections would then be decided by ties, and boxes
    would be the anchors untouched. Seeded He weights give distinct scores
    and real box regressions.
    """
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                fan_in = m.weight[0].numel()
                m.weight.normal_(0.0, gain * (2.0 / fan_in) ** 0.5)
                if m.bias is not None:
                    m.bias.fill_(bias)


def calibrate_outputs(model, run_inputs, targets, seed):
    """Rescales layers so that their outputs have a chosen spread.

    targets: [(layer, std, mean)]: after this, the layer's output over a
    seeded input has standard deviation `std` and mean `mean` (weights
    scaled, bias set). Used on detection heads, whose outputs decide which
    detections exist: class logits spread enough that scores are distinct
    and only some pass the threshold, box deltas small.
    """
    if not targets:
        return
    g = torch.Generator().manual_seed(seed)
    # One run measures every target (a run of a detector costs seconds; the
    # targets are parallel heads, or the RPN before the box head, whose
    # output spread barely depends on the RPN's scale).
    seen = [[] for _ in targets]
    hooks = [layer.register_forward_hook(lambda mod, i, o, k=k: seen[k].append(o.detach().flatten()))
             for k, (layer, _, _) in enumerate(targets)]
    with torch.no_grad():
        model(*run_inputs(g))
    for h in hooks:
        h.remove()
    with torch.no_grad():
        for (layer, std, mean), outs in zip(targets, seen):
            out = torch.cat(outs)
            bias_part = layer.bias.mean() if layer.bias is not None else 0.0
            layer.weight.mul_(std / max(float((out - bias_part).std()), 1e-12))
            if layer.bias is not None:
                layer.bias.fill_(mean)


def randomize_zero_parameters(model, seed):
    """Parameters torchvision initialises to zero (ViT's classifier head and
    class token, MViT's relative positions) get small seeded values: a zero
    head makes the output zero whatever the backbone computes."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() > 1 and not torch.any(p):
                p.copy_(0.02 * torch.randn(p.shape, generator=g))


# --------------------------------------------------------------------------
# The zoo. Each entry: family, build() -> module, input shapes, and how the
# outputs are compared.
# --------------------------------------------------------------------------

MODELS = {}


def model(name, family, inputs, outputs, dynamic=None, compare="tensor", detection=None,
          heads=None):
    """Registers a builder. inputs: [(name, shape)] of float32 inputs;
    outputs: output names; dynamic: torch.onnx.export dynamic_axes."""
    def wrap(fn):
        MODELS[name] = dict(name=name, family=family, build=fn, inputs=inputs, outputs=outputs,
                            dynamic=dynamic, compare=compare, detection=detection or {},
                            heads=heads)
        return fn
    return wrap


def _classifier_axes():
    return {"input": {0: "batch"}, "output": {0: "batch"}}


# Classification ------------------------------------------------------------

@model("resnet18", "classification", [("input", (1, 3, 64, 64))], ["output"], _classifier_axes())
def build_resnet18():
    import torchvision
    return torchvision.models.resnet18(weights=None)  # 64x64 input instead of 224


# (EfficientNet is not in the zoo: with random weights its residual stages
# cancel, and PyTorch's own float32 result is 4e-4 off the float64 one, so a
# 1e-4 comparison would test rounding, not the runtime.)


@model("mobilenet_v3_small", "classification", [("input", (1, 3, 64, 64))], ["output"],
       _classifier_axes())
def build_mobilenet_v3_small():
    import torchvision
    return torchvision.models.mobilenet_v3_small(weights=None)


@model("regnet_y_400mf", "classification", [("input", (1, 3, 64, 64))], ["output"],
       _classifier_axes())
def build_regnet_y_400mf():
    import torchvision
    return torchvision.models.regnet_y_400mf(weights=None)


@model("shufflenet_v2_x0_5", "classification", [("input", (1, 3, 64, 64))], ["output"],
       _classifier_axes())
def build_shufflenet():
    import torchvision
    return torchvision.models.shufflenet_v2_x0_5(weights=None)


@model("densenet121", "classification", [("input", (1, 3, 64, 64))], ["output"],
       _classifier_axes())
def build_densenet121():
    import torchvision
    return torchvision.models.densenet121(weights=None)


@model("googlenet", "classification", [("input", (1, 3, 64, 64))], ["output"],
       _classifier_axes())
def build_googlenet():
    import torchvision
    # aux_logits=False: the auxiliary heads only exist in training.
    return torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=True)


@model("convnext", "classification", [("input", (1, 3, 64, 64))], ["output"],
       _classifier_axes())
def build_convnext():
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    # convnext_tiny's four stages (96..768 channels, 3/3/9/3 blocks) reduced
    # to 32..256 channels and 1/1/2/1 blocks.
    setting = [CNBlockConfig(32, 64, 1), CNBlockConfig(64, 128, 1),
               CNBlockConfig(128, 256, 2), CNBlockConfig(256, None, 1)]
    return ConvNeXt(setting, stochastic_depth_prob=0.0)


@model("vit", "classification", [("input", (1, 3, 32, 32))], ["output"], _classifier_axes())
def build_vit():
    from torchvision.models import VisionTransformer
    # vit_b_16 (224x224, 12 layers, hidden 768, MLP 3072) reduced to a
    # 32x32 image, patch 8, 2 layers, hidden 64, MLP 128.
    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4,
                             hidden_dim=64, mlp_dim=128)


@model("swin", "classification", [("input", (1, 3, 64, 64))], ["output"], _classifier_axes())
def build_swin():
    from torchvision.models import SwinTransformer
    # swin_t (embed 96, depths 2/2/6/2, heads 3/6/12/24, window 7) reduced to
    # embed 32, depths 2/2, heads 2/4, window 4 on a 64x64 image: still two
    # blocks per stage, so the shifted-window block (its mask) is exported.
    # (Swin V2 is not in the zoo: PyTorch 1.13 cannot export it, its
    # attention zeroes part of the qkv bias in place: aten::zero_.)
    return SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4],
                           window_size=[4, 4], stochastic_depth_prob=0.0)


@model("maxvit", "classification", [("input", (1, 3, 64, 64))], ["output"], _classifier_axes())
def build_maxvit():
    from torchvision.models import MaxVit
    # maxvit_t (224x224, stem 64, channels 64..512, layers 2/2/5/2, partition
    # 7) reduced to 64x64, stem 16, channels 16/32, one layer each,
    # partition 4 (the image is 16x16 after the stem, 8x8 after stage 1).
    return MaxVit(input_size=(64, 64), stem_channels=16, partition_size=4,
                  block_channels=[16, 32], block_layers=[1, 1], head_dim=8,
                  stochastic_depth_prob=0.0)


# Segmentation ----------------------------------------------------------------

_SEG_AXES = {"input": {0: "batch", 2: "height", 3: "width"},
             "out": {0: "batch", 2: "height", 3: "width"}}


@model("fcn_resnet50", "segmentation", [("input", (1, 3, 64, 64))], ["out"], _SEG_AXES)
def build_fcn():
    import torchvision
    return torchvision.models.segmentation.fcn_resnet50(weights=None, weights_backbone=None,
                                                       num_classes=21, aux_loss=False)


@model("deeplabv3_mobilenet_v3_large", "segmentation", [("input", (1, 3, 64, 64))], ["out"],
       _SEG_AXES)
def build_deeplabv3():
    import torchvision
    return torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=21, aux_loss=False)


@model("lraspp_mobilenet_v3_large", "segmentation", [("input", (1, 3, 64, 64))], ["out"],
       _SEG_AXES)
def build_lraspp():
    import torchvision
    return torchvision.models.segmentation.lraspp_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=21)


# Detection -------------------------------------------------------------------
# Input: one image [3, H, W] (the model's list of images has one entry), H
# and W symbolic. Outputs: boxes [N, 4], labels [N], scores [N] (+ masks,
# keypoints), N data-dependent.
#
# Heads: torchvision initialises them for fine-tuning (std 0.01 weights and
# a prior bias), so with random weights every anchor has the same score and
# its box is the anchor: which detections survive NMS would be decided by
# ties. `heads` rescales their last layers on seeded data: class logits of
# std 2 around a negative mean (distinct scores, a few dozen above the
# threshold), box deltas of std 0.1 (boxes move off their anchors).

_DET_AXES = {"image": {1: "height", 2: "width"}, "boxes": {0: "detections"},
             "labels": {0: "detections"}, "scores": {0: "detections"}}
_DET_OUT = ["boxes", "labels", "scores"]


def _det(extra_out=()):
    axes = dict(_DET_AXES)
    axes.update({n: {0: "detections"} for n in extra_out})
    return list(_DET_OUT) + list(extra_out), axes


def _dense_heads(m):
    """RetinaNet, FCOS: He towers, then calibrated logits and deltas. The
    logits' spread is 1 (RetinaNet's towers have no normalisation: their
    outputs are heavy-tailed, and a spread of 2 saturated scores at 1.0,
    i.e. ties). FCOS regresses box sides as relu(output) times the anchor
    size: a mean of 1 gives boxes of a few anchors, not points. Its
    centerness logits get a spread of 0.3: a score is sqrt(sigmoid(class) *
    sigmoid(centerness)), and the centerness branch ends a ResNet-50, an FPN
    and a four-conv tower whose float32 rounding is 1e-4 (PyTorch's) to 3e-4
    (Backplane's) of its output's scale, measured against a float64 run; at
    a spread of 1 that moved scores by the whole 1e-4 tolerance, at 0.3
    PyTorch's float32 detections stay within 0.3 of it from float64's."""
    reinit(m.head.classification_head.conv)
    reinit(m.head.regression_head.conv)
    fcos = hasattr(m.head.regression_head, "bbox_ctrness")
    t = [(m.head.classification_head.cls_logits, 1.0, -2.5),
         (m.head.regression_head.bbox_reg, 0.3 if fcos else 0.1, 1.0 if fcos else 0.0)]
    if fcos:
        t.append((m.head.regression_head.bbox_ctrness, 0.3, 0.0))
    return t


def _ssd_heads(m):
    """SSDlite: the last conv of each feature map's class and box branch."""
    return ([(_last_conv(l), 2.0, -4.0) for l in m.head.classification_head.module_list]
            + [(_last_conv(l), 0.1, 0.0) for l in m.head.regression_head.module_list])


def _rcnn_heads(m):
    """R-CNN: the RPN (objectness, deltas) and the box predictor (class
    logits, deltas)."""
    reinit(m.rpn.head.conv)
    return [(m.rpn.head.cls_logits, 2.0, 0.0), (m.rpn.head.bbox_pred, 0.1, 0.0),
            (m.roi_heads.box_predictor.cls_score, 2.0, 0.0),
            (m.roi_heads.box_predictor.bbox_pred, 0.1, 0.0)]


def _last_conv(seq):
    return [c for c in seq.modules() if isinstance(c, nn.Conv2d)][-1]


@model("ssdlite320_mobilenet_v3_large", "detection", [("image", (3, 96, 128))], *_det(),
       compare="detection", detection=dict(score_thresh=0.3, max_detections=50),
       heads=_ssd_heads)
def build_ssdlite():
    import torchvision
    # Size: SSDlite resizes every image to its fixed 320x320 inside the
    # model. 10 classes instead of 91: its post-processing loops over the
    # classes in Python, which the export unrolls (91 copies took 27 s).
    return torchvision.models.detection.ssdlite320_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=10, score_thresh=0.3,
        detections_per_img=50, topk_candidates=100)


@model("retinanet_resnet50_fpn", "detection", [("image", (3, 96, 128))], *_det(),
       compare="detection", detection=dict(score_thresh=0.3, max_detections=50),
       heads=_dense_heads)
def build_retinanet():
    import torchvision
    # Size: min_size/max_size 128/160 instead of 800/1333.
    return torchvision.models.detection.retinanet_resnet50_fpn(
        weights=None, weights_backbone=None, min_size=128, max_size=160, score_thresh=0.3,
        detections_per_img=50, topk_candidates=100)


@model("fcos_resnet50_fpn", "detection", [("image", (3, 96, 128))], *_det(),
       compare="detection", detection=dict(score_thresh=0.3, max_detections=50),
       heads=_dense_heads)
def build_fcos():
    import torchvision
    # Size: min_size/max_size 128/160 instead of 800/1333.
    return torchvision.models.detection.fcos_resnet50_fpn(
        weights=None, weights_backbone=None, min_size=128, max_size=160, score_thresh=0.3,
        detections_per_img=50, topk_candidates=100)


@model("fasterrcnn_mobilenet_v3_large_320_fpn", "detection", [("image", (3, 96, 128))],
       *_det(), compare="detection", detection=dict(score_thresh=0.3, max_detections=50),
       heads=_rcnn_heads)
def build_fasterrcnn():
    import torchvision
    # Size: min_size/max_size stay this variant's 320/320; 100/50 proposals
    # before/after NMS instead of 150/150.
    return torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None, box_score_thresh=0.3, box_detections_per_img=50,
        rpn_pre_nms_top_n_test=100, rpn_post_nms_top_n_test=50)


@model("maskrcnn_resnet50_fpn", "detection", [("image", (3, 96, 128))], *_det(["masks"]),
       compare="detection", detection=dict(score_thresh=0.3, max_detections=10),
       heads=_rcnn_heads)
def build_maskrcnn():
    import torchvision
    # Size: min_size/max_size 128/160 instead of 800/1333; 100/50 proposals.
    return torchvision.models.detection.maskrcnn_resnet50_fpn(
        weights=None, weights_backbone=None, min_size=128, max_size=160, box_score_thresh=0.3,
        box_detections_per_img=10, rpn_pre_nms_top_n_test=100, rpn_post_nms_top_n_test=50)


@model("keypointrcnn_resnet50_fpn", "detection", [("image", (3, 96, 128))],
       *_det(["keypoints", "keypoints_scores"]), compare="detection",
       detection=dict(score_thresh=0.3, max_detections=4), heads=_rcnn_heads)
def build_keypointrcnn():
    import torchvision
    # Size: as maskrcnn, at most 4 detections (its keypoint head, eight
    # 512-channel convs per detection, costs more than the rest). Two classes
    # (background, person), torchvision's.
    return torchvision.models.detection.keypointrcnn_resnet50_fpn(
        weights=None, weights_backbone=None, min_size=128, max_size=160, box_score_thresh=0.3,
        box_detections_per_img=4, rpn_pre_nms_top_n_test=100, rpn_post_nms_top_n_test=50)


# Video -----------------------------------------------------------------------

_VIDEO_AXES = {"input": {0: "batch"}, "output": {0: "batch"}}


@model("r3d_18", "video", [("input", (1, 3, 4, 32, 32))], ["output"], _VIDEO_AXES)
def build_r3d():
    import torchvision
    return torchvision.models.video.r3d_18(weights=None)  # 4x32x32 clip instead of 16x112x112


@model("mc3_18", "video", [("input", (1, 3, 4, 32, 32))], ["output"], _VIDEO_AXES)
def build_mc3():
    import torchvision
    return torchvision.models.video.mc3_18(weights=None)


@model("r2plus1d_18", "video", [("input", (1, 3, 4, 32, 32))], ["output"], _VIDEO_AXES)
def build_r2plus1d():
    import torchvision
    return torchvision.models.video.r2plus1d_18(weights=None)


@model("mvit_v2", "video", [("input", (1, 3, 4, 32, 32))], ["output"], _VIDEO_AXES)
def build_mvit():
    from torchvision.models.video.mvit import MSBlockConfig, MViT
    # mvit_v2_s (16 blocks, 96..768 channels, 16x224x224 clips) reduced to 3
    # blocks of 32..64 channels on a 4x32x32 clip, with its pooled attention
    # (q and kv strides), relative positions and residual pooling.
    blocks = [
        MSBlockConfig(num_heads=1, input_channels=32, output_channels=32, kernel_q=[3, 3, 3],
                      kernel_kv=[3, 3, 3], stride_q=[1, 1, 1], stride_kv=[1, 2, 2]),
        MSBlockConfig(num_heads=2, input_channels=32, output_channels=64, kernel_q=[3, 3, 3],
                      kernel_kv=[3, 3, 3], stride_q=[1, 2, 2], stride_kv=[1, 1, 1]),
        MSBlockConfig(num_heads=2, input_channels=64, output_channels=64, kernel_q=[3, 3, 3],
                      kernel_kv=[3, 3, 3], stride_q=[1, 1, 1], stride_kv=[1, 1, 1]),
    ]
    return MViT(spatial_size=(32, 32), temporal_size=4, block_setting=blocks,
                residual_pool=True, residual_with_cls_embed=False, rel_pos_embed=True,
                proj_after_attn=True, stochastic_depth_prob=0.0, num_classes=10)


# --------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------

def check_export(path, names, expected):
    """The export's outputs must carry PyTorch's dtypes. A detector returns
    a dict, and torch.onnx.export names the flattened values in the order
    given: names in another order than the dict's silently swap outputs
    (SSD, RetinaNet and FCOS return boxes, scores, labels; the R-CNNs boxes,
    labels, scores)."""
    import onnx
    from onnx import mapping
    outs = {o.name: o.type.tensor_type.elem_type
            for o in onnx.load(path, load_external_data=False).graph.output}
    for n, t in zip(names, expected):
        want = t.detach().numpy().dtype
        got = mapping.TENSOR_TYPE_TO_NP_TYPE.get(outs.get(n, 0))
        if got != want:
            raise RuntimeError(f"the export's output '{n}' is {got}, PyTorch's is {want}")


def _seed_of(name):
    return SEED + int(hashlib.sha256(name.encode()).hexdigest()[:6], 16)


def make_inputs(spec):
    rng = np.random.default_rng(_seed_of(spec["name"]))
    out = []
    for n, shape in spec["inputs"]:
        if spec["compare"] == "detection":
            a = rng.random(shape, dtype=np.float32)  # an image in [0, 1), as detectors take
        else:
            a = rng.standard_normal(shape).astype(np.float32)
        out.append((n, a))
    return out


def torch_args(spec, arrays):
    tensors = [torch.from_numpy(a) for _, a in arrays]
    if spec["compare"] == "detection":
        return (tensors,)  # the detector's list of images
    return tuple(tensors)


def build(spec):
    torch.manual_seed(_seed_of(spec["name"]))
    m = spec["build"]()
    m.eval()
    shapes = [s for _, s in spec["inputs"]]

    def calib_inputs(g):
        # a batch of 4: BN statistics over more than one sample
        return tuple(torch.randn(4, *s[1:], generator=g) for s in shapes)

    def one_image(g):
        return ([torch.rand(*shapes[0], generator=g)],)

    randomize_zero_parameters(m, seed=_seed_of(spec["name"]) + 3)
    if spec["compare"] == "detection":
        # A detector's BatchNorms are all in its backbone: calibrate that
        # alone on two normalised 160x160 images (the heads' RoI work would
        # cost more than everything else), then its heads on one image.
        calibrate_batchnorm(m.backbone, lambda g: (torch.randn(2, 3, 160, 160, generator=g),),
                            seed=_seed_of(spec["name"]) + 1)
    else:
        calibrate_batchnorm(m, calib_inputs, seed=_seed_of(spec["name"]) + 1)
    randomize_layernorm(m, seed=_seed_of(spec["name"]) + 2)
    if spec["heads"]:
        calibrate_outputs(m, one_image, spec["heads"](m), seed=_seed_of(spec["name"]) + 4)
    m.eval()
    return m


def flatten_outputs(spec, result):
    if spec["compare"] == "detection":
        d = result[0]
        return [d[n] for n in spec["outputs"]]
    if isinstance(result, dict):
        return [result[n] for n in spec["outputs"]]
    if isinstance(result, (tuple, list)):
        return list(result)
    return [result]


def register_roi_align_opset16():
    """torchvision 0.14 exports roi_align with its opset-11 symbolic at every
    opset, without coordinate_transformation_mode. From opset 16 ONNX reads a
    missing one as half_pixel (torchvision's aligned=True), but the
    detectors' MultiScaleRoIAlign uses aligned=False: output_half_pixel. This
    symbolic (torchvision 0.15's) says which, from `aligned`."""
    import torchvision.ops  # noqa: F401 (registers the opset-11 symbolics first)
    from torch.onnx import register_custom_op_symbolic
    from torch.onnx.symbolic_helper import parse_args
    from torch.onnx.symbolic_opset11 import select, squeeze
    from torch.onnx.symbolic_opset9 import _cast_Long

    @parse_args("v", "v", "f", "i", "i", "i", "i")
    def roi_align(g, input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio,
                  aligned):
        batch_indices = _cast_Long(g, squeeze(g, select(
            g, rois, 1, g.op("Constant", value_t=torch.tensor([0], dtype=torch.long))), 1), False)
        rois = select(g, rois, 1, g.op("Constant",
                                       value_t=torch.tensor([1, 2, 3, 4], dtype=torch.long)))
        return g.op("RoiAlign", input, rois, batch_indices, spatial_scale_f=spatial_scale,
                    output_height_i=pooled_height, output_width_i=pooled_width,
                    sampling_ratio_i=max(sampling_ratio, 0),
                    coordinate_transformation_mode_s="half_pixel" if aligned
                    else "output_half_pixel")

    register_custom_op_symbolic("torchvision::roi_align", roi_align, 16)


def generate(spec, out_dir, force, stamp):
    name = spec["name"]
    stamp_path = os.path.join(out_dir, name + ".stamp")
    if not force and os.path.exists(stamp_path) and open(stamp_path).read() == stamp:
        return "cached", 0.0, 0.0
    t0, c0 = time.time(), time.process_time()
    m = build(spec)
    arrays = make_inputs(spec)
    args = torch_args(spec, arrays)
    with torch.no_grad():
        if spec["compare"] == "tensor":
            # The reference in float64, rounded once to float32: a float32
            # reference carries its own rounding, as large as ours on deep
            # random nets, and two float32 results differ by the sum of both.
            ref = copy.deepcopy(m).double()
            exact = flatten_outputs(spec, ref(*(a.double() for a in args)))
            del ref
            expected = [t.float() for t in exact]
            # How far PyTorch's own float32 result is: a model whose float32
            # error nears the tolerance is ill-conditioned (gen_zoo's fault).
            f32_error = max(float((f.double() - e).abs().max() / max(float(e.abs().max()), 1e-30))
                            for f, e in zip(flatten_outputs(spec, m(*args)), exact))
        else:
            # Detectors in float32, as users run them: their thresholds and
            # NMS decide in float32, and the comparison tolerates cut-offs.
            result = m(*args)
            expected = flatten_outputs(spec, result)
            f32_error = None
    # The export names outputs in the order the model returns them.
    export_names = list(spec["outputs"])
    if spec["compare"] == "detection":
        export_names = list(result[0].keys())
        if sorted(export_names) != sorted(spec["outputs"]):
            raise RuntimeError(f"the model returns {export_names}, the zoo lists {spec['outputs']}")
    # Export to a temporary name, then rename: a killed run leaves no half
    # file that looks current.
    onnx_path = os.path.join(out_dir, name + ".onnx")
    fd, tmp = tempfile.mkstemp(dir=out_dir, suffix=".onnx.tmp")
    os.close(fd)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if OPSET >= 16:
            register_roi_align_opset16()
        torch.onnx.export(m, args, tmp, opset_version=OPSET, do_constant_folding=True,
                          input_names=[n for n, _ in spec["inputs"]],
                          output_names=export_names, dynamic_axes=spec["dynamic"])
    os.chmod(tmp, 0o644)  # mkstemp makes it 0600
    try:
        check_export(tmp, spec["outputs"], expected)
    except RuntimeError:
        os.remove(tmp)
        raise
    os.replace(tmp, onnx_path)
    for n, a in arrays:
        np.save(os.path.join(out_dir, f"{name}.input.{n}.npy"), a)
    for n, t in zip(spec["outputs"], expected):
        np.save(os.path.join(out_dir, f"{name}.expected.{n}.npy"), t.detach().numpy())
    seconds, cpu = time.time() - t0, time.process_time() - c0
    meta = dict(name=name, family=spec["family"], opset=OPSET,
                inputs=[n for n, _ in spec["inputs"]], outputs=spec["outputs"],
                compare=spec["compare"], detection=spec["detection"],
                generate_seconds=round(seconds, 2), generate_cpu_seconds=round(cpu, 2),
                pytorch_float32_error=f32_error)
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump(meta, f, indent=1)
    with open(stamp_path, "w") as f:
        f.write(stamp)
    return "generated", seconds, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="output directory")
    ap.add_argument("--models", default="", help="comma-separated names (default: all)")
    ap.add_argument("--list", action="store_true", help="print 'name family' lines and exit")
    ap.add_argument("--force", action="store_true", help="regenerate even if the stamp matches")
    a = ap.parse_args()
    if a.list:
        for spec in MODELS.values():
            print(spec["name"], spec["family"])
        return 0
    if not a.out:
        ap.error("--out is required")
    names = [n for n in a.models.split(",") if n] or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown model(s): {', '.join(unknown)}; --list shows the zoo")
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    failed = 0
    stamp = _stamp()
    for n in names:
        try:
            what, secs, cpu = generate(MODELS[n], a.out, a.force, stamp)
            print(f"{n}: {what}" + (f" in {secs:.1f} s ({cpu:.1f} s CPU)" if what == "generated" else ""),
                  flush=True)
        except Exception as e:  # one model's export failure must not hide the others
            failed += 1
            print(f"{n}: generation failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
