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


def _tokenizer(*special: str):
    """A copy of the shipped text's byte-level BPE with ``special`` tokens added."""
    import copy

    import task_models

    tok = copy.deepcopy(task_models.tokenizer("bart"))
    if special:
        tok.add_special_tokens({"additional_special_tokens": list(special)})
    return tok


def _llama(tok, max_positions: int = 512):
    """A two-block Llama of width 32 over ``tok``: the language model of the vision-language builders."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )


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

    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    d = _prepare(d)
    tok = _tokenizer("<image>")
    vision = CLIPVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8
    )
    text = _llama(tok, 256)
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


SMOLVLM_CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)  # SmolVLM-Instruct's processor chat template


def idefics3(d, split: bool = True, chat: bool = True) -> Path:
    """Idefics3ForConditionalGeneration: a SigLIP-style vision tower (32 px tiles in 8 px patches: 16
    patches, pixel-shuffled by scale_factor 2 into 4 image tokens per tile), a Llama text model.
    With ``split`` the image processor resizes the longest edge to 64 and cuts 2x2 tiles of 32 plus a
    global image (5 tiles, row/col tokens), as SmolVLM does; else one 32 px global image."""

    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessor,
        Idefics3Processor,
    )
    from transformers.models.idefics3.configuration_idefics3 import Idefics3VisionConfig

    d = _prepare(d)
    tok = _tokenizer()
    rowcol = [f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6)]
    tok.add_special_tokens(
        {
            "additional_special_tokens": [
                "<fake_token_around_image>",
                "<image>",
                "<end_of_utterance>",
                "<global-img>",
                *rowcol,
            ]
        }
    )
    tile, patch, scale = 32, 8, 2
    image_seq_len = ((tile // patch) ** 2) // (scale**2)  # 4
    images = Idefics3ImageProcessor(
        size={"longest_edge": 2 * tile if split else tile},
        max_image_size={"longest_edge": tile},
        do_image_splitting=split,
    )
    processor = Idefics3Processor(
        image_processor=images,
        tokenizer=tok,
        image_seq_len=image_seq_len,
        chat_template=SMOLVLM_CHAT_TEMPLATE if chat else None,
    )
    tok = processor.tokenizer
    vision = Idefics3VisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=tile,
        patch_size=patch,
    )
    text = _llama(tok)
    config = Idefics3Config(
        vision_config=vision,
        text_config=text,
        image_token_id=tok.convert_tokens_to_ids("<image>"),
        scale_factor=scale,
        pad_token_id=tok.pad_token_id,
    )
    Idefics3ForConditionalGeneration(config).save_pretrained(d)
    processor.save_pretrained(d)
    return d


def paligemma(d) -> Path:
    """PaliGemmaForConditionalGeneration: a SigLIP vision tower (32 px images in 8 px patches: 16 image
    tokens), a Gemma text model; the processor adds <image> and PaliGemma's 1152 <locNNNN>/<segNNN>
    tokens, and writes prompts as <image>*16 <bos> prompt \\n."""

    from transformers import (
        GemmaConfig,
        PaliGemmaConfig,
        PaliGemmaForConditionalGeneration,
        PaliGemmaProcessor,
        SiglipImageProcessor,
        SiglipVisionConfig,
    )

    d = _prepare(d)
    tok = _tokenizer()
    side, patch = 32, 8
    seq = (side // patch) ** 2
    images = SiglipImageProcessor(size={"height": side, "width": side})
    images.image_seq_length = seq
    processor = PaliGemmaProcessor(image_processor=images, tokenizer=tok)
    tok = processor.tokenizer
    vision = SiglipVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=side,
        patch_size=patch,
        vision_use_head=False,  # as PaliGemma's SigLIP (no attention-pooling head: its weights would be unused)
    )
    text = GemmaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=512,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    config = PaliGemmaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tok.convert_tokens_to_ids("<image>"),
        vocab_size=len(tok),
        projection_dim=32,
        hidden_size=32,
        pad_token_id=tok.pad_token_id,
    )
    PaliGemmaForConditionalGeneration(config).save_pretrained(d)
    processor.save_pretrained(d)
    return d


def llava_next(d) -> Path:
    """LlavaNextForConditionalGeneration: a CLIP tower (32 px tiles, 8 px patches, CLS: 17 positions,
    'default' strategy drops CLS -> 16), anyres pinpoints [[32,32],[32,64],[64,32]], a Llama text model."""

    from transformers import (
        CLIPVisionConfig,
        LlavaNextConfig,
        LlavaNextForConditionalGeneration,
        LlavaNextImageProcessor,
        LlavaNextProcessor,
    )

    d = _prepare(d)
    tok = _tokenizer("<image>")
    side, patch = 32, 8
    pinpoints = [[32, 32], [32, 64], [64, 32]]
    vision = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=side,
        patch_size=patch,
    )
    text = _llama(tok)
    config = LlavaNextConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tok.convert_tokens_to_ids("<image>"),
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
        image_grid_pinpoints=pinpoints,
        image_seq_length=(side // patch) ** 2,
    )
    LlavaNextForConditionalGeneration(config).save_pretrained(d)
    images = LlavaNextImageProcessor(
        size={"shortest_edge": side}, crop_size={"height": side, "width": side}, image_grid_pinpoints=pinpoints
    )
    processor = LlavaNextProcessor(
        image_processor=images,
        tokenizer=tok,
        patch_size=patch,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
    )
    processor.save_pretrained(d)
    return d


QWEN_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for c in message['content'] %}{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)  # Qwen2-VL-Instruct's template, without the default system turn and the video/picture counters


def blip2(d) -> Path:
    """Blip2ForConditionalGeneration: a BLIP vision tower (32 px, 8 px patches), a one-layer Q-Former with
    4 queries, an OPT language model; the processor prepends 4 <image> tokens to every text."""

    from transformers import (
        Blip2Config,
        Blip2ForConditionalGeneration,
        Blip2Processor,
        Blip2QFormerConfig,
        Blip2VisionConfig,
        BlipImageProcessor,
        OPTConfig,
    )

    d = _prepare(d)
    tok = _tokenizer()
    side, patch, queries = 32, 8, 4
    images = BlipImageProcessor(size={"height": side, "width": side})
    processor = Blip2Processor(image_processor=images, tokenizer=tok, num_query_tokens=queries)  # adds <image>
    tok = processor.tokenizer
    vision = Blip2VisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=side,
        patch_size=patch,
        initializer_range=0.02,  # the default 1e-10 leaves the random tower ~0: int8 would round it all to 0
    )
    qformer = Blip2QFormerConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        encoder_hidden_size=32,
        cross_attention_frequency=1,
    )
    text = OPTConfig(
        vocab_size=len(tok),
        hidden_size=32,
        ffn_dim=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        word_embed_proj_dim=32,
        max_position_embeddings=512,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    config = Blip2Config(
        vision_config=vision.to_dict(),
        qformer_config=qformer.to_dict(),
        text_config=text.to_dict(),
        num_query_tokens=queries,
        image_text_hidden_size=32,
        image_token_index=tok.convert_tokens_to_ids("<image>"),
    )
    model = Blip2ForConditionalGeneration(config)
    with torch.no_grad():
        model.query_tokens.normal_(0.0, 0.02)  # initialised to zeros: every query would read alike
    model.save_pretrained(d)
    processor.save_pretrained(d)
    return d


ALL_VLMS = {"llava": llava, "idefics3": idefics3, "paligemma": paligemma, "llava_next": llava_next, "blip2": blip2}
