"""One tiny random-weight directory per transformers architecture class, for the architecture battery.

Each builder writes what a user's ``save_pretrained`` would: config, safetensors weights and the
tokenizer or processor the class needs, so ``model=hf model.name_or_path=DIR`` loads it offline. The
models are as small as each class allows, yet their Linear (and convolution) layers hold most of the
parameters, as in a real checkpoint: width 64, 2 layers, 4 heads of 16, feed-forward 256, vocabularies
of about 300. Causal LMs use modelxray's byte tokenizer (257 ids), so they ship no tokenizer; the other
text models get a tokenizer of 300 tokens trained on a slice of the shipped Python docs; the speech
recognisers' and LLaVA's processors are saved with ``processor.save_pretrained``, the transformers 5 way
(one ``processor_config.json``), the image classifiers' and the keyword spotter's alone (their own
``preprocessor_config.json``). Every builder is seeded.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

WIDTH, FFN, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 64, 256, 2, 4, 2, 16
POSITIONS = 128
BYTE_VOCAB = 264  # holds the byte tokenizer's 257 ids (256 is its bos, eos and pad)
BYTE_END = 256
TEXT_VOCAB = 300
SAMPLING_RATE = 16000
IMAGE = 32  # image side in pixels

# one family's kwargs for its config class
LLAMA_LIKE = dict(
    hidden_size=WIDTH,
    intermediate_size=FFN,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=KV_HEADS,
    max_position_embeddings=POSITIONS,
)
BYTE_IDS = dict(bos_token_id=BYTE_END, eos_token_id=BYTE_END, pad_token_id=BYTE_END)
MOE = dict(num_experts_per_tok=2, moe_intermediate_size=FFN // 2)


def _prepare(d) -> Path:
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    return d


def _build(d, model_class: str, config_class: str, *parts, **config) -> Path:
    """``model_class(config_class(**config))`` saved in ``d``, with ``parts`` (tokenizer, processor) beside it."""
    import transformers

    d = _prepare(d)
    model = getattr(transformers, model_class)(getattr(transformers, config_class)(**config))
    model.save_pretrained(d)
    for part in parts:
        part.save_pretrained(d)
    return d


# -- causal LMs: byte-tokenizer vocabulary, no tokenizer files --------------------------------------
CAUSAL = {
    # class: (config class, its kwargs)
    "GPT2LMHeadModel": ("GPT2Config", dict(n_embd=WIDTH, n_layer=LAYERS, n_head=HEADS, n_inner=FFN, n_positions=POSITIONS)),
    "LlamaForCausalLM": ("LlamaConfig", LLAMA_LIKE),
    "MistralForCausalLM": ("MistralConfig", dict(LLAMA_LIKE, head_dim=HEAD_DIM)),
    "Qwen2ForCausalLM": ("Qwen2Config", LLAMA_LIKE),
    "Qwen3ForCausalLM": ("Qwen3Config", dict(LLAMA_LIKE, head_dim=HEAD_DIM)),
    "GemmaForCausalLM": ("GemmaConfig", dict(LLAMA_LIKE, head_dim=HEAD_DIM)),
    "Gemma2ForCausalLM": ("Gemma2Config", dict(LLAMA_LIKE, head_dim=HEAD_DIM, query_pre_attn_scalar=HEAD_DIM, sliding_window=16)),
    "Gemma3ForCausalLM": ("Gemma3TextConfig", dict(LLAMA_LIKE, head_dim=HEAD_DIM, query_pre_attn_scalar=HEAD_DIM, sliding_window=16)),
    "PhiForCausalLM": ("PhiConfig", LLAMA_LIKE),
    "Phi3ForCausalLM": ("Phi3Config", LLAMA_LIKE),
    "GPTNeoXForCausalLM": ("GPTNeoXConfig", {k: v for k, v in LLAMA_LIKE.items() if k != "num_key_value_heads"}),
    "OPTForCausalLM": ("OPTConfig", dict(hidden_size=WIDTH, ffn_dim=FFN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, word_embed_proj_dim=WIDTH, max_position_embeddings=POSITIONS)),
    "BloomForCausalLM": ("BloomConfig", dict(hidden_size=WIDTH, n_layer=LAYERS, n_head=HEADS)),
    "FalconForCausalLM": ("FalconConfig", dict(hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_kv_heads=KV_HEADS, new_decoder_architecture=True, ffn_hidden_size=FFN)),
    "GPTJForCausalLM": ("GPTJConfig", dict(n_embd=WIDTH, n_layer=LAYERS, n_head=HEADS, n_inner=FFN, rotary_dim=8, n_positions=POSITIONS)),
    "StableLmForCausalLM": ("StableLmConfig", LLAMA_LIKE),
    "OlmoForCausalLM": ("OlmoConfig", LLAMA_LIKE),
    "Olmo2ForCausalLM": ("Olmo2Config", LLAMA_LIKE),
    "MixtralForCausalLM": ("MixtralConfig", dict(LLAMA_LIKE, num_local_experts=4, num_experts_per_tok=2)),
    "Qwen2MoeForCausalLM": ("Qwen2MoeConfig", dict(LLAMA_LIKE, **MOE, num_experts=4, shared_expert_intermediate_size=FFN // 2)),
    "Qwen3MoeForCausalLM": ("Qwen3MoeConfig", dict(LLAMA_LIKE, **MOE, num_experts=4, head_dim=HEAD_DIM)),
    "GptOssForCausalLM": ("GptOssConfig", dict(LLAMA_LIKE, num_local_experts=4, num_experts_per_tok=2, head_dim=HEAD_DIM, layer_types=["sliding_attention", "full_attention"], sliding_window=16)),
    "CohereForCausalLM": ("CohereConfig", LLAMA_LIKE),
    "GraniteForCausalLM": ("GraniteConfig", LLAMA_LIKE),
    "SmolLM3ForCausalLM": ("SmolLM3Config", LLAMA_LIKE),
    "Starcoder2ForCausalLM": ("Starcoder2Config", LLAMA_LIKE),
    "GPTNeoForCausalLM": ("GPTNeoConfig", dict(hidden_size=WIDTH, num_layers=LAYERS, num_heads=HEADS, intermediate_size=FFN, attention_types=[[["global", "local"], 1]], window_size=16, max_position_embeddings=POSITIONS)),
    "CodeGenForCausalLM": ("CodeGenConfig", dict(n_embd=WIDTH, n_layer=LAYERS, n_head=HEADS, n_inner=FFN, rotary_dim=8, n_positions=POSITIONS, n_ctx=POSITIONS)),
}  # fmt: skip


def causal_lm(name: str, d) -> Path:
    config_class, config = CAUSAL[name]
    return _build(d, name, config_class, vocab_size=BYTE_VOCAB, **BYTE_IDS, **config)


# -- text tokenizers: trained once per process on a slice of the shipped text ---------------------
@functools.cache
def tokenizer(style: str):
    """A ``style`` tokenizer (bert, bart, t5, whisper) of about 300 tokens; do not mutate: copy."""
    from modelxray.models.text_tokenizer import train_tokenizer
    from task_models import shipped_text

    return train_tokenizer(shipped_text()[:60_000], TEXT_VOCAB, style)


def _save_tokenizer(style: str, d: Path, max_length: int = POSITIONS):
    import copy

    from modelxray.models.text_tokenizer import save_tokenizer

    tok = copy.deepcopy(tokenizer(style))
    tok.model_max_length = max_length  # truncation cuts where the model's positions end
    save_tokenizer(tok, d)
    return tok


def _labels(n: int) -> dict:
    id2label = {i: f"LABEL_{i}" for i in range(n)}
    return dict(num_labels=n, id2label=id2label, label2id={v: k for k, v in id2label.items()})


BERT_LIKE = dict(
    hidden_size=WIDTH,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    intermediate_size=FFN,
    max_position_embeddings=POSITIONS,
)


def _encoder(d, model_class: str, config_class: str, style: str, **config) -> Path:
    """An encoder of ``model_class`` over the ``style`` tokenizer, saved with it."""
    d = _prepare(d)
    tok = _save_tokenizer(style, d)
    if config_class == "ModernBertConfig":  # its defaults name ids of a 50k vocabulary
        ends = dict(cls_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id)
        config = dict(config, **ends, bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id)
    return _build(d, model_class, config_class, vocab_size=len(tok), pad_token_id=tok.pad_token_id, **config)


ENCODERS = {
    # class: (config class, tokenizer style, kwargs)
    "BertForMaskedLM": ("BertConfig", "bert", BERT_LIKE),
    "RobertaForMaskedLM": ("RobertaConfig", "bart", dict(BERT_LIKE, max_position_embeddings=POSITIONS + 2)),
    "DistilBertForMaskedLM": ("DistilBertConfig", "bert", dict(dim=WIDTH, n_layers=LAYERS, n_heads=HEADS, hidden_dim=FFN, max_position_embeddings=POSITIONS)),
    "AlbertForMaskedLM": ("AlbertConfig", "bert", dict(BERT_LIKE, embedding_size=32)),
    "ElectraForMaskedLM": ("ElectraConfig", "bert", dict(BERT_LIKE, embedding_size=WIDTH)),
    "DebertaV2ForMaskedLM": ("DebertaV2Config", "bert", dict(BERT_LIKE, relative_attention=True, position_buckets=16, max_relative_positions=POSITIONS)),
    "ModernBertForMaskedLM": ("ModernBertConfig", "bert", dict(BERT_LIKE, local_attention=16, global_attn_every_n_layers=2)),
    "DistilBertForSequenceClassification": ("DistilBertConfig", "bert", dict(dim=WIDTH, n_layers=LAYERS, n_heads=HEADS, hidden_dim=FFN, max_position_embeddings=POSITIONS, **_labels(4))),
    "RobertaForTokenClassification": ("RobertaConfig", "bart", dict(BERT_LIKE, max_position_embeddings=POSITIONS + 2, **_labels(5))),
}  # fmt: skip


def encoder(name: str, d) -> Path:
    config_class, style, config = ENCODERS[name]
    return _encoder(d, name, config_class, style, **config)


# -- sequence-to-sequence -----------------------------------------------------------------------
def t5(d) -> Path:
    """T5: the decoder starts from <pad> and stops at </s>."""
    d = _prepare(d)
    tok = _save_tokenizer("t5", d)
    return _build(
        d, "T5ForConditionalGeneration", "T5Config",
        vocab_size=len(tok), d_model=WIDTH, d_kv=HEAD_DIM, d_ff=FFN, num_layers=LAYERS, num_heads=HEADS,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, decoder_start_token_id=tok.pad_token_id,
    )  # fmt: skip


def _bart_like(d, model_class: str, config_class: str, **extra) -> Path:
    d = _prepare(d)
    tok = _save_tokenizer("bart", d)
    return _build(
        d, model_class, config_class,
        vocab_size=len(tok), d_model=WIDTH, encoder_layers=LAYERS, decoder_layers=LAYERS,
        encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN,
        max_position_embeddings=POSITIONS, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, **extra,
    )  # fmt: skip


def bart(d) -> Path:
    """BART: the decoder starts from </s>."""
    tok = tokenizer("bart")
    return _bart_like(d, "BartForConditionalGeneration", "BartConfig", bos_token_id=tok.bos_token_id,
                      decoder_start_token_id=tok.eos_token_id, forced_eos_token_id=tok.eos_token_id)  # fmt: skip


def pegasus(d) -> Path:
    """Pegasus: the decoder starts from <pad>."""
    tok = tokenizer("bart")
    return _bart_like(d, "PegasusForConditionalGeneration", "PegasusConfig", decoder_start_token_id=tok.pad_token_id)


def marian(d) -> Path:
    """Marian (MarianMTModel): the decoder starts from <pad>, as OPUS-MT's do."""
    tok = tokenizer("bart")
    return _bart_like(d, "MarianMTModel", "MarianConfig", decoder_start_token_id=tok.pad_token_id,
                      decoder_vocab_size=len(tok))  # fmt: skip


# -- image classifiers: pixels of IMAGE x IMAGE, the image processor saved beside ----------------
def _image_classifier(d, model_class: str, config_class: str, **config) -> Path:
    from transformers import ViTImageProcessor

    processor = ViTImageProcessor(size={"height": IMAGE, "width": IMAGE}, image_mean=[0.5] * 3, image_std=[0.25] * 3)
    return _build(d, model_class, config_class, processor, num_labels=10, **config)


VIT_LIKE = dict(
    image_size=IMAGE,
    patch_size=8,
    hidden_size=WIDTH,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    intermediate_size=FFN,
)
IMAGE_CLASSIFIERS = {
    "ViTForImageClassification": ("ViTConfig", VIT_LIKE),
    "DeiTForImageClassification": ("DeiTConfig", VIT_LIKE),
    "ConvNextForImageClassification": ("ConvNextConfig", dict(num_stages=2, hidden_sizes=[32, 64], depths=[1, 1])),
    "ResNetForImageClassification": ("ResNetConfig", dict(embedding_size=16, hidden_sizes=[32, 64], depths=[1, 1])),
    "MobileNetV2ForImageClassification": ("MobileNetV2Config", dict(image_size=IMAGE, depth_multiplier=0.35)),
    "SwinForImageClassification": (
        "SwinConfig",
        dict(image_size=IMAGE, patch_size=4, embed_dim=32, depths=[1, 1], num_heads=[2, 4], window_size=4),
    ),
}


def image_classifier(name: str, d) -> Path:
    config_class, config = IMAGE_CLASSIFIERS[name]
    return _image_classifier(d, name, config_class, **config)


# -- speech: processors saved the transformers 5 way (processor_config.json) -----------------------
def _ctc_tokenizer(d: Path):
    from transformers import Wav2Vec2CTCTokenizer

    from modelxray.models.text_tokenizer import ctc_vocab
    from task_models import shipped_text

    vocab = ctc_vocab(shipped_text()[:60_000])
    (d / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    return Wav2Vec2CTCTokenizer(
        os.fspath(d / "vocab.json"), pad_token="<pad>", word_delimiter_token="|", do_lower_case=False
    )


def _speech_encoder(d, model_class: str, config_class: str, processor: bool = True, **config) -> Path:
    """A Wav2Vec2-style encoder whose conv stack strides 5*8*8 = 320 samples (50 frames/s), with its
    Wav2Vec2Processor (feature extractor and CTC tokenizer) saved by ``processor.save_pretrained``."""
    from transformers import Wav2Vec2FeatureExtractor, Wav2Vec2Processor

    d = _prepare(d)
    features = Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=SAMPLING_RATE, do_normalize=True)
    parts = [features]
    if processor:
        tok = _ctc_tokenizer(d)
        parts = [Wav2Vec2Processor(feature_extractor=features, tokenizer=tok)]
        config.update(vocab_size=len(tok), pad_token_id=tok.pad_token_id, ctc_zero_infinity=True)
    return _build(
        d, model_class, config_class, *parts,
        hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=FFN,
        conv_dim=(32, 32, 32), conv_stride=(5, 8, 8), conv_kernel=(10, 8, 8),
        num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2, feat_extract_norm="group", **config,
    )  # fmt: skip


def wav2vec2_ctc(d) -> Path:
    return _speech_encoder(d, "Wav2Vec2ForCTC", "Wav2Vec2Config")


def hubert_ctc(d) -> Path:
    return _speech_encoder(d, "HubertForCTC", "HubertConfig")


def wavlm_ctc(d) -> Path:
    return _speech_encoder(d, "WavLMForCTC", "WavLMConfig", num_buckets=16, max_bucket_distance=64)


def wav2vec2_audio_classifier(d) -> Path:
    """A keyword spotter: labels are spoken words; its feature extractor alone, no tokenizer."""
    words = ("yes", "no", "up", "down")
    labels = dict(id2label=dict(enumerate(words)), label2id={w: i for i, w in enumerate(words)})
    return _speech_encoder(
        d, "Wav2Vec2ForSequenceClassification", "Wav2Vec2Config", processor=False, classifier_proj_size=16, **labels
    )


def whisper(d) -> Path:
    """Whisper on a 5 s window (500 mel frames), its WhisperProcessor saved with ``save_pretrained``."""
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
    )

    d = _prepare(d)
    tok = _save_tokenizer("whisper", d)
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("<|startoftranscript|>", "<|en|>", "<|transcribe|>")}
    features = WhisperFeatureExtractor(feature_size=80, sampling_rate=SAMPLING_RATE, chunk_length=5)
    config = WhisperConfig(
        vocab_size=len(tok), num_mel_bins=80, d_model=WIDTH, encoder_layers=LAYERS, decoder_layers=LAYERS,
        encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN,
        max_source_positions=features.nb_max_frames // 2, max_target_positions=64,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
        decoder_start_token_id=ids["<|startoftranscript|>"], begin_suppress_tokens=[tok.eos_token_id], suppress_tokens=[],
    )  # fmt: skip
    model = WhisperForConditionalGeneration(config)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=ids["<|startoftranscript|>"], bos_token_id=tok.eos_token_id,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, max_length=64,
        begin_suppress_tokens=[tok.eos_token_id], suppress_tokens=[], is_multilingual=True,
        lang_to_id={"<|en|>": ids["<|en|>"]}, task_to_id={"transcribe": ids["<|transcribe|>"]},
        language="en", task="transcribe", no_timestamps_token_id=tok.convert_tokens_to_ids("<|notimestamps|>"),
    )  # fmt: skip
    model.save_pretrained(d)
    WhisperProcessor(feature_extractor=features, tokenizer=tok).save_pretrained(d)
    return d


# -- vision-language ---------------------------------------------------------------------------
VISION_TOWER = dict(hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=FFN)


def clip(d) -> Path:
    """CLIPModel, a zero-shot classifier: the byte tokenizer's prompts (its text vocabulary holds 300 ids)."""
    from transformers import CLIPImageProcessor

    text = dict(VISION_TOWER, vocab_size=300, max_position_embeddings=40, **BYTE_IDS)
    vision = dict(VISION_TOWER, image_size=IMAGE, patch_size=8)
    images = CLIPImageProcessor(size={"shortest_edge": IMAGE}, crop_size={"height": IMAGE, "width": IMAGE})
    return _build(d, "CLIPModel", "CLIPConfig", images, text_config=text, vision_config=vision, projection_dim=32)


def siglip(d) -> Path:
    """SiglipModel, a zero-shot classifier with the byte tokenizer's prompts."""
    from transformers import SiglipImageProcessor

    text = dict(VISION_TOWER, vocab_size=300, max_position_embeddings=32, **BYTE_IDS)
    vision = dict(VISION_TOWER, image_size=IMAGE, patch_size=8)
    images = SiglipImageProcessor(size={"height": IMAGE, "width": IMAGE})
    return _build(d, "SiglipModel", "SiglipConfig", images, text_config=text, vision_config=vision)


def llava(d) -> Path:
    """LLaVA: a CLIP vision tower (32 px images in 8 px patches: 16 image positions) and a Llama over the
    byte-level BPE with an <image> token, its LlavaProcessor saved with ``save_pretrained``."""
    import copy

    from transformers import CLIPImageProcessor, CLIPVisionConfig, LlamaConfig, LlavaProcessor

    tok = copy.deepcopy(tokenizer("bart"))
    tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
    vision = CLIPVisionConfig(**VISION_TOWER, image_size=IMAGE, patch_size=8)
    text = LlamaConfig(
        vocab_size=len(tok), **LLAMA_LIKE, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    images = CLIPImageProcessor(size={"shortest_edge": IMAGE}, crop_size={"height": IMAGE, "width": IMAGE})
    processor = LlavaProcessor(
        image_processor=images, tokenizer=tok, patch_size=8, vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
    )  # fmt: skip
    config = dict(image_token_id=tok.convert_tokens_to_ids("<image>"), vision_feature_layer=-1)
    return _build(d, "LlavaForConditionalGeneration", "LlavaConfig", processor, vision_config=vision,
                  text_config=text, **config)  # fmt: skip


# -- the battery: how each family runs, and what it must show ------------------------------------
# What ``python run.py model=hf model.name_or_path=DIR quant=int8`` runs, made cheap: one timed pass at
# batch 1, no per-module timing, no dashboard, a few examples.
RUN = [
    "quant=int8",
    "tracker=none",
    "progress=false",
    "report.dashboard=false",
    "analyzer.performance.iters=1",
    "analyzer.performance.warmup=0",
    "analyzer.performance.layer_timing=false",
    "analyzer.performance.speed_batch_sizes=[1]",
    "runtime.reference_cache_dir=null",
]
GENERATE = ["analyzer.performance.generate_examples=2", "analyzer.performance.max_new_tokens=4"]
DATA = {  # family: its data overrides (text datasets also take dataset.cache_dir)
    "causal": ["model.tokenizer=byte", "dataset.max_tokens=256", "dataset.seq_len=32"],
    "text": ["dataset.examples=8", "dataset.seq_len=32", "analyzer.performance.bootstrap=10", *GENERATE],
    "speech": ["dataset.examples=4", "analyzer.performance.bootstrap=10", *GENERATE],
    "images": ["dataset=digits", "dataset.max_test=32"],
    "image_text": ["dataset.examples=4", "analyzer.performance.max_new_tokens=2"],
}
TEXT_DATA = ("causal", "text", "speech")  # families on a text dataset (spoken, for speech)
# report.headline's quality figure each family must lead with
QUALITY = {
    "causal": "perplexity",
    "text": "perplexity",
    "speech": "wer",
    "images": "accuracy",
    "image_text": "perplexity",
}
# embeddings, norms and biases stay float (at most 28% here); a Linear or convolution left float adds more
MAX_FLOAT_SHARE = 0.3


@dataclass(frozen=True)
class Arch:
    build: Callable  # (directory) -> the directory, saved
    family: str  # a key of DATA
    quality: str = ""  # the headline quality metric, where it is not the family's

    @property
    def quality_metric(self) -> str:
        return f"performance/{self.quality or QUALITY[self.family]}"


# one per transformers class (its name)
ARCHS: dict[str, Arch] = {
    **{name: Arch(functools.partial(causal_lm, name), "causal") for name in CAUSAL},
    **{
        name: Arch(functools.partial(encoder, name), "text", "accuracy" if "Classification" in name else "")
        for name in ENCODERS
    },
    "T5ForConditionalGeneration": Arch(t5, "text"),
    "BartForConditionalGeneration": Arch(bart, "text"),
    "MarianMTModel": Arch(marian, "text"),
    "PegasusForConditionalGeneration": Arch(pegasus, "text"),
    **{name: Arch(functools.partial(image_classifier, name), "images") for name in IMAGE_CLASSIFIERS},
    "Wav2Vec2ForCTC": Arch(wav2vec2_ctc, "speech"),
    "HubertForCTC": Arch(hubert_ctc, "speech"),
    "WavLMForCTC": Arch(wavlm_ctc, "speech"),
    "WhisperForConditionalGeneration": Arch(whisper, "speech", "perplexity"),  # teacher-forced, before WER
    "Wav2Vec2ForSequenceClassification": Arch(wav2vec2_audio_classifier, "speech", "accuracy"),
    "CLIPModel": Arch(clip, "images"),
    "SiglipModel": Arch(siglip, "images"),
    "LlavaForConditionalGeneration": Arch(llava, "image_text"),
}


def battery_overrides(name: str, directory: Path, cache_dir: str) -> list[str]:
    arch = ARCHS[name]
    cache = [f"dataset.cache_dir={cache_dir}"] if arch.family in TEXT_DATA else []
    return ["model=hf", f"model.name_or_path={directory}", *RUN, *DATA[arch.family], *cache]


# the battery in two halves, one a file, so that the two xdist workers share it
TEXT_HALF = [*CAUSAL, *(name for name in ENCODERS if name.endswith("ForMaskedLM"))]
VISION_SPEECH_HALF = [name for name in ARCHS if name not in TEXT_HALF]


def run_battery(name: str, tmp_path: Path, cache_dir: str, monkeypatch):
    """Build ``name``'s directory and analyze it quantized to int8: the run must finish, every Linear
    and convolution be quantized, and its headline quality be the family's, and finite. Figures are
    not drawn: they are the kind's, not the architecture's (the kinds' own tests draw them), and cost
    about a second a run."""
    import math

    import modelxray
    from modelxray.config.settings import HEADLINE
    from modelxray.core.presentation import PlotsFromModule

    monkeypatch.setattr(PlotsFromModule, "figures", lambda self, result: {})
    arch = ARCHS[name]
    directory = arch.build(tmp_path / "model")
    out = modelxray.analyze(battery_overrides(name, directory, cache_dir), output_dir=tmp_path / "run")
    assert not out.skipped and not out.failed, {n: out.results[n].error for n in out.failed}
    float_share = out.metrics["quant/params_float_share"]
    assert float_share <= MAX_FLOAT_SHARE, f"{float_share:.0%} of {name}'s parameters stayed float"
    quality = next(k for k in HEADLINE[0].split("|") if k in out.metrics)  # what report.headline leads with
    assert quality == arch.quality_metric and math.isfinite(out.metrics[quality]), (quality, out.metrics[quality])
    return out
