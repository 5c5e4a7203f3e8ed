"""Tiny random-weight Hugging Face detectors, segmenters and vision backbones, saved with
``save_pretrained`` (config, weights, image processor) so ``model=hf`` loads them offline as a user's
directory. Seeded; 64x64 inputs; no timm (DETR's backbone is a transformers ResNet)."""

from __future__ import annotations

from pathlib import Path

import torch

SIZE = 64
LABELS = {i: str(i) for i in range(10)}  # the digits, as the canvases label them


def _prepare(d) -> Path:
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    return d


def detr(d) -> Path:
    from transformers import DetrConfig, DetrForObjectDetection, DetrImageProcessor, ResNetConfig

    d = _prepare(d)
    backbone = ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], out_features=["stage2"])
    config = DetrConfig(
        use_timm_backbone=False,
        backbone_config=backbone,
        use_pretrained_backbone=False,
        d_model=32,
        encoder_layers=1,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        num_queries=10,
        id2label=LABELS,
        label2id={v: k for k, v in LABELS.items()},
    )
    DetrForObjectDetection(config).save_pretrained(d)
    DetrImageProcessor(size={"shortest_edge": SIZE, "longest_edge": SIZE}).save_pretrained(d)
    return d


def yolos(d) -> Path:
    from transformers import YolosConfig, YolosForObjectDetection, YolosImageProcessor

    d = _prepare(d)
    config = YolosConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=[SIZE, SIZE],
        patch_size=8,
        num_detection_tokens=10,
        id2label=LABELS,
        label2id={v: k for k, v in LABELS.items()},
    )
    YolosForObjectDetection(config).save_pretrained(d)
    YolosImageProcessor(size={"shortest_edge": SIZE, "longest_edge": SIZE}).save_pretrained(d)
    return d


def segformer(d) -> Path:
    from transformers import SegformerConfig, SegformerForSemanticSegmentation, SegformerImageProcessor

    d = _prepare(d)
    labels = {0: "background", **{i + 1: str(i) for i in range(10)}}
    config = SegformerConfig(
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[2, 1],
        hidden_sizes=[16, 32],
        patch_sizes=[7, 3],
        strides=[4, 2],
        num_attention_heads=[1, 2],
        mlp_ratios=[2, 2],
        decoder_hidden_size=32,
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
    )
    SegformerForSemanticSegmentation(config).save_pretrained(d)
    SegformerImageProcessor(size={"height": SIZE, "width": SIZE}).save_pretrained(d)
    return d


def dinov2(d) -> Path:
    from transformers import BitImageProcessor, Dinov2Config, Dinov2Model

    d = _prepare(d)
    config = Dinov2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2, image_size=SIZE, patch_size=8
    )
    Dinov2Model(config).save_pretrained(d)
    BitImageProcessor(size={"shortest_edge": SIZE}, crop_size={"height": SIZE, "width": SIZE}).save_pretrained(d)
    return d


def mask2former(d) -> Path:
    """Mask2Former (a mask-query universal segmenter) on a tiny Swin backbone: scored by its semantic maps."""
    from transformers import (
        Mask2FormerConfig,
        Mask2FormerForUniversalSegmentation,
        Mask2FormerImageProcessor,
        SwinConfig,
    )

    d = _prepare(d)
    labels = {0: "background", **{i + 1: str(i) for i in range(10)}}
    swin = SwinConfig(
        image_size=SIZE,
        patch_size=4,
        embed_dim=16,
        depths=[1, 1, 1, 1],
        num_heads=[1, 1, 2, 2],
        window_size=4,
        out_features=["stage1", "stage2", "stage3", "stage4"],
    )
    config = Mask2FormerConfig(
        backbone_config=swin,
        feature_size=32,
        mask_feature_size=32,
        hidden_dim=32,
        encoder_feedforward_dim=64,
        dim_feedforward=64,
        encoder_layers=1,
        decoder_layers=2,
        num_attention_heads=2,
        num_queries=8,
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
    )
    Mask2FormerForUniversalSegmentation(config).save_pretrained(d)
    Mask2FormerImageProcessor(size={"height": SIZE, "width": SIZE}).save_pretrained(d)
    return d


ALL = {"detr": detr, "yolos": yolos, "segformer": segformer, "dinov2": dinov2, "mask2former": mask2former}


def llava(d) -> Path:
    """LlavaForConditionalGeneration: a CLIP vision tower (32 px images in 8 px patches: 16 image
    positions), a Llama language model, the byte-level BPE of the shipped text with an <image> token."""
    import copy

    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    import task_models

    d = _prepare(d)
    tok = copy.deepcopy(task_models.tokenizer("bart"))
    tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
    vision = CLIPVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8
    )
    text = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_id=tok.convert_tokens_to_ids("<image>"),
        vision_feature_layer=-1,
    )
    LlavaForConditionalGeneration(config).save_pretrained(d)
    images = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    processor = LlavaProcessor(
        image_processor=images,
        tokenizer=tok,
        patch_size=8,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
    )
    processor.save_pretrained(d)
    return d


ALL["llava"] = llava
