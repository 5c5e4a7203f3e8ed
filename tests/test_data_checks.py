"""Every user dataset checks its files before the model loads (``check_source``, no model, no
tokenizer): each broken input is one line naming ``dataset.<key>`` and the file (and the line of a
JSONL or CSV file), and invalid boxes or masks are refused or dropped with a count, never scored
silently. One end-to-end run shows the line comes before any weight is read."""

from __future__ import annotations

import json
import wave
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from modelxray.core.errors import ConfigError
from modelxray.data.audio_folder import AudioFolder
from modelxray.data.coco_folder import CocoFolder
from modelxray.data.mask_folder import MaskFolder
from modelxray.data.text_files import TextFiles
from modelxray.data.user_text import ImageQuestions, LabelledText, TextPairs


def one_line(check, key: str, *parts: str) -> str:
    """The ConfigError ``check()`` raises: one line, under ``key``, holding each of ``parts``."""
    with pytest.raises(ConfigError) as info:
        check()
    said = str(info.value)
    assert "\n" not in said and said.startswith(f"{key}: "), said
    for part in parts:
        assert part in said, said
    return said


# -- COCO folders -----------------------------------------------------------------------------------
def _annotation(i: int, bbox: list, image_id: int = 1, category_id: int = 7, **more) -> dict:
    return {"id": i, "image_id": image_id, "category_id": category_id, "bbox": bbox, "iscrowd": 0, **more}


@pytest.fixture
def scenes(tmp_path) -> Path:
    """Two 40 x 20 images, each with one box of category 7."""
    root = tmp_path / "scenes"
    root.mkdir()
    for i in range(2):
        Image.new("RGB", (40, 20), (50 * i, 0, 0)).save(root / f"{i}.png")
    _write_spec(root, [_annotation(1, [0, 0, 10, 10]), _annotation(2, [20, 5, 20, 15], image_id=2)])
    return root


def _write_spec(root: Path, annotations: list, **changes) -> Path:
    spec = {
        "images": [{"id": i + 1, "file_name": f"{i}.png", "width": 40, "height": 20} for i in range(2)],
        "categories": [{"id": 7, "name": "three"}],
        "annotations": annotations,
        **changes,
    }
    (root / "instances.json").write_text(json.dumps(spec))
    return root / "instances.json"


def test_a_good_coco_folder_passes_its_check(scenes):
    CocoFolder(root=str(scenes)).check_source()


def test_an_annotations_file_that_is_a_list_or_no_json_is_one_line(scenes):
    where = scenes / "instances.json"
    where.write_text(json.dumps([{"images": []}]))
    one_line(CocoFolder(root=str(scenes)).check_source, "dataset.annotations", str(where), "a JSON list, not an object")
    where.write_text("{oops")
    one_line(CocoFolder(root=str(scenes)).check_source, "dataset.annotations", str(where), "not readable JSON")
    where.write_text(json.dumps({"images": [], "annotations": []}))
    one_line(CocoFolder(root=str(scenes)).check_source, "dataset.annotations", "no 'categories' list")


@pytest.mark.parametrize(
    "annotation, said",
    [
        (_annotation(5, [0, 0, 10, 10], category_id=99), "annotations[0] (id 5) names category_id 99, which"),
        (_annotation(5, [0, 0, 10, 10], image_id=9), "annotations[0] (id 5) names image_id 9, which no entry"),
        (_annotation(5, [0, 0, 10]), "annotations[0] (id 5) has bbox [0, 0, 10]: COCO's bbox is [x, y, width"),
        (_annotation(5, [0, 0, "10", 5]), "has bbox [0, 0, '10', 5]: COCO's bbox is"),
        (_annotation(5, [10, 0, -5, 5]), "has bbox [10, 0, -5, 5] of negative width or height"),
        (_annotation(5, [30, 0, 20, 10]), "has bbox [30, 0, 20, 10], which reaches outside its image 0.png (40 x 20"),
        (_annotation(5, [0, 0, 40, 20]), None),  # the whole image: inside
        (_annotation(5, [-0.5, 0, 40.6, 20.4]), None),  # a rounding's reach: clipped
        (
            _annotation(5, [0, 0, 10, 10], segmentation={"size": [40, 20], "counts": "abc"}),
            "an RLE mask of size [40, 20] (height, width), and its image 0.png is 20 x 40",
        ),
        (_annotation(5, [0, 0, 10, 10], segmentation="polygon"), "neither polygons (a list) nor an RLE"),
    ],
)
def test_each_bad_annotation_is_one_line_naming_the_entry(scenes, annotation, said):
    where = _write_spec(scenes, [annotation])
    dataset = CocoFolder(root=str(scenes))
    if said is None:
        dataset.check_source()
    else:
        one_line(dataset.check_source, "dataset.annotations", str(where), said)


def test_an_image_missing_unreadable_or_of_another_size_is_one_line(scenes):
    (scenes / "1.png").unlink()
    one_line(CocoFolder(root=str(scenes)).check_source, "dataset.root", "image '1.png'", str(scenes))
    (scenes / "1.png").write_text("no image")
    one_line(CocoFolder(root=str(scenes)).check_source, "dataset.root", str(scenes / "1.png"), "no readable image")
    Image.new("RGB", (20, 40)).save(scenes / "1.png")
    one_line(
        CocoFolder(root=str(scenes)).check_source,
        "dataset.annotations",
        "image id 2 is 40 x 20 pixels there, and",
        "1.png is 20 x 40",
    )
    assert CocoFolder(root=str(scenes), max_images=1).check_source() is None  # only the scored images are read


def test_holding_out_every_image_is_one_line_before_the_model_loads(scenes, segments):
    said = "holds out 2 of 2 images, leaving none to score"
    one_line(CocoFolder(root=str(scenes), calibration_images=2).check_source, "dataset.calibration_images", said)
    one_line(MaskFolder(root=str(segments), calibration_images=1).check_source, "dataset.calibration_images")


def test_images_without_width_and_height_take_their_files(scenes):
    spec = json.loads((scenes / "instances.json").read_text())
    polygon = [[0, 0, 10, 0, 10, 10, 0, 10]]
    spec["annotations"][0]["segmentation"] = polygon
    for image in spec["images"]:
        del image["width"], image["height"]
    (scenes / "instances.json").write_text(json.dumps(spec))
    data = CocoFolder(root=str(scenes)).load(canvas_size=40, channels=3)
    assert (data.masks[0][:20, :10] == 7).all()  # pycocotools drew the polygon at the file's size


def test_zero_size_boxes_are_dropped_and_counted_in_the_data(scenes):
    _write_spec(scenes, [_annotation(1, [0, 0, 10, 10]), _annotation(2, [5, 5, 0, 3]), _annotation(3, [1, 1, 4, 0])])
    data = CocoFolder(root=str(scenes)).load(canvas_size=40, channels=3)
    assert data.meta["dropped"] == {"zero-size boxes": 2} and "zero-size boxes dropped: 2" in data.description
    assert data.n_examples == 1 and [len(b) for b in data.boxes] == [1]
    _write_spec(scenes, [_annotation(1, [5, 5, 0, 3])])
    one_line(CocoFolder(root=str(scenes)).check_source, "dataset.annotations", "annotates no image with a box")
    _write_spec(scenes, [_annotation(1, [0, 0, 10, 10])])
    assert "dropped" not in CocoFolder(root=str(scenes)).load(canvas_size=40).meta


def test_a_category_that_is_no_class_of_the_model_is_one_line(scenes):
    dataset = CocoFolder(root=str(scenes))
    assert dataset.load(canvas_size=40, label2id={"three": 3}, n_classes=4).labels[0].tolist() == [3]
    one_line(
        lambda: dataset.load(canvas_size=40, label2id={"one": 1}, n_classes=4),
        "dataset.annotations",
        "categories 'three' (id 7) are none of the model's 4 classes",
    )


# -- mask folders -----------------------------------------------------------------------------------
@pytest.fixture
def segments(tmp_path) -> Path:
    root = tmp_path / "segments"
    for sub in ("images", "masks"):
        (root / sub).mkdir(parents=True)
    Image.new("RGB", (20, 20)).save(root / "images" / "0.png")
    Image.fromarray(np.full((20, 20), 2, dtype=np.uint8), mode="L").save(root / "masks" / "0.png")
    return root


def test_a_mask_of_another_size_or_of_colours_is_one_line(segments):
    MaskFolder(root=str(segments)).check_source()
    mask = segments / "masks" / "0.png"
    Image.fromarray(np.zeros((10, 20), dtype=np.uint8), mode="L").save(mask)
    one_line(MaskFolder(root=str(segments)).check_source, "dataset.masks", str(mask), "is 20 x 10 pixels and its")
    Image.new("RGB", (20, 20)).save(mask)
    one_line(MaskFolder(root=str(segments)).check_source, "dataset.masks", str(mask), "is a RGB image")


def test_mask_values_that_are_no_class_of_the_model_are_one_line(segments):
    mask = segments / "masks" / "0.png"
    values = np.full((20, 20), 2, dtype=np.uint8)
    values[0, :4] = [7, 9, 255, 0]
    Image.fromarray(values, mode="L").save(mask)
    load = MaskFolder(root=str(segments)).load
    one_line(
        lambda: load(canvas_size=20, class_names=["a", "b", "c"]),
        "dataset.masks",
        str(mask),
        "holds values 7, 9, none of the model's 3 classes (0 to 2) nor dataset.ignore_index=255",
        "dataset.reduce_labels=true",
    )
    assert load(canvas_size=20, class_names=[str(c) for c in range(10)]).masks.max() == 9
    assert load(canvas_size=20).masks.max() == 9  # a backbone names no classes


# -- labelled texts, pairs and questions about images -------------------------------------------------
def test_bad_lines_of_a_jsonl_file_are_one_line_naming_the_line(tmp_path):
    path = tmp_path / "l.jsonl"
    path.write_text('{"text": "fine", "label": "pos"}\n\n{"text": "cut", "label": \n')
    one_line(LabelledText(path=str(path)).check_source, "dataset.path", f"{path} line 3 is not JSON")
    path.write_text('{"text": "fine", "label": "pos"}\n["text", "pos"]\n')
    one_line(LabelledText(path=str(path)).check_source, "dataset.path", f"{path} line 2 is not an object")
    path.write_text('{"text": "fine", "label": "pos"}\n{"text": "no label"}\n')
    one_line(
        LabelledText(path=str(path)).check_source,
        "dataset.path",
        f"{path} row 2 has no label or labels or class field (line 2; its fields: text)",
    )
    pairs = tmp_path / "p.jsonl"
    pairs.write_text('{"source": "a", "target": "b"}\n\n{"source": "c"}\n')
    one_line(
        TextPairs(path=str(pairs)).check_source,
        "dataset.path",
        f"{pairs} row 2 has no target or output or summary field (line 3;",
    )
    pairs.write_bytes(b'{"source": "\xff", "target": "b"}\n')
    one_line(TextPairs(path=str(pairs)).check_source, "dataset.path", f"{pairs} is not UTF-8 text")


def test_bad_rows_of_a_csv_file_are_one_line_naming_the_line(tmp_path):
    path = tmp_path / "l.csv"
    path.write_text("text,label\nhello,pos\n")
    LabelledText(path=str(path)).check_source()
    path.write_text("text,lbl\nhello,pos\n")
    one_line(
        LabelledText(path=str(path)).check_source,
        "dataset.path",
        f"{path} row 1 has no label or labels or class field (line 2; its fields: text, lbl)",
    )
    path.write_text("text,label\nhello,pos\nhello, world,neg\n")
    one_line(LabelledText(path=str(path)).check_source, "dataset.path", f"{path} line 3 has 3 fields and the header 2")
    path.write_text("text,label\n")
    one_line(LabelledText(path=str(path)).check_source, "dataset.path", f"{path} holds no rows")


def test_questions_naming_a_missing_or_unreadable_image_are_one_line(tmp_path):
    Image.new("RGB", (8, 8)).save(tmp_path / "ok.png")
    path = tmp_path / "q.jsonl"
    rows = [{"image": "ok.png", "prompt": "What?", "answer": "A"}, {"image": "gone.png", "prompt": "?", "answer": "B"}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    one_line(
        ImageQuestions(path=str(path)).check_source,
        "dataset.path",
        f"{path} row 2: image 'gone.png' is not in {tmp_path} (line 2)",
    )
    ImageQuestions(path=str(path), max_examples=1).check_source()  # the rows scored, no more
    (tmp_path / "gone.png").write_text("text")
    one_line(
        ImageQuestions(path=str(path)).check_source, "dataset.path", f"{path} row 2 (line 2): ", "no readable image"
    )


def test_a_dataset_of_another_kind_of_model_is_one_line(tmp_path):
    from modelxray.kinds.table import named

    path = tmp_path / "l.csv"
    path.write_text("text,label\nhello,pos\n")
    dataset = LabelledText(path=str(path))
    dataset.check_kind(named("sequence_classification"))
    dataset.check_kind(named("weights"))  # reads no data
    one_line(
        lambda: dataset.check_kind(named("causal_lm")),
        "dataset",
        "labelled_text:l.csv holds labelled texts, which a model of kind sequence_classification reads, and the "
        "model is of kind causal_lm: use a text dataset",
    )
    one_line(lambda: dataset.load(None), "dataset", "labelled_text:l.csv holds labelled texts", "another kind")


# -- audio folders and text files ---------------------------------------------------------------------
def _wav(path: Path, samples: int = 1600) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(np.zeros(samples, dtype="<i2").tobytes())


def test_audio_that_is_no_wav_or_a_bad_transcripts_line_is_one_line(tmp_path):
    clips = tmp_path / "clips"
    clips.mkdir()
    _wav(clips / "a.wav")
    (clips / "song.mp3").write_bytes(b"ID3\x03\x00\x00\x00" + bytes(200))
    table = clips / "transcripts.tsv"
    table.write_text("a.wav\thello\nsong.mp3\tla la\n")
    check = AudioFolder(path=str(clips)).check_source
    one_line(check, "dataset.path", str(clips / "song.mp3"), "is MP3, not PCM WAV: convert it")
    AudioFolder(path=str(clips), max_examples=1).check_source()  # the clips scored, no more
    _wav(clips / "empty.wav", samples=0)
    table.write_text("a.wav\thello\nempty.wav\tnothing\n")
    one_line(check, "dataset.path", str(clips / "empty.wav"), "holds no audio")
    table.write_text("a.wav\thello\nzzz.wav\tgone\n")
    one_line(check, "dataset.transcripts", f"line 2 of {table} names 'zzz.wav'")
    table.unlink()
    rows = clips / "transcripts.jsonl"
    rows.write_text('{"file": "a.wav", "text": "hi"}\n{"file": "a.wav", "text": \n')
    one_line(check, "dataset.transcripts", f"line 2 of {rows} is not JSON")


def test_text_files_that_do_not_decode_are_one_line(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(b"caf\xe9 au lait\n")
    one_line(TextFiles(paths=[str(path)]).check_source, "dataset.paths", f"{path} is not utf-8 text")
    TextFiles(paths=[str(path)], encoding="latin-1").check_source()
    one_line(lambda: TextFiles(paths=[str(path)], encoding="nope"), "encoding", "'nope' is no text encoding")


# -- the run: the line comes before the model loads -----------------------------------------------------
def test_a_bad_coco_folder_stops_the_run_before_the_model_loads(scenes, tmp_path, monkeypatch):
    import modelxray
    import modelxray.models.hf as hf

    detector = tmp_path / "detector"  # its config.json alone says it is a detector: no weight is needed
    detector.mkdir()
    config = {"model_type": "detr", "architectures": ["DetrForObjectDetection"], "use_timm_backbone": False}
    (detector / "config.json").write_text(json.dumps(config))
    monkeypatch.setattr(hf.HFSource, "load", lambda self: pytest.fail("the model was loaded"))
    where = _write_spec(scenes, [_annotation(1, [0, 0, 10, 10], category_id=99)])
    args = ["model=hf", f"model.name_or_path={detector}", "dataset=coco_folder", f"dataset.root={scenes}"]
    with pytest.raises(ConfigError) as info:
        modelxray.analyze([*args, "tracker=none", "progress=false"], output_dir=tmp_path / "out")
    assert str(info.value).startswith(f"dataset.annotations: {where}: annotations[0] (id 1) names category_id 99")


def test_labelled_text_for_a_causal_lm_is_one_line_before_the_model_loads(tmp_path, monkeypatch):
    """The model's kind is in its config.json: a dataset of another kind's examples is refused before
    any weight is read."""
    from transformers import GPT2Config

    import modelxray
    from modelxray.models.hf import HFSource

    GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, architectures=["GPT2LMHeadModel"]).save_pretrained(
        tmp_path / "gpt2"
    )
    (tmp_path / "labels.csv").write_text("text,label\nhello there,a\ngood bye,b\n")

    def never(*_a, **_k):
        raise AssertionError("the model loaded before the data was checked")

    monkeypatch.setattr(HFSource, "load", never)
    with pytest.raises(ConfigError, match=r"^dataset: .*the model is of kind causal_lm: use a text dataset"):
        modelxray.analyze(["model=hf", f"model.name_or_path={tmp_path / 'gpt2'}", "dataset=labelled_text",
                           f"dataset.path={tmp_path / 'labels.csv'}", "tracker=none"], output_dir=tmp_path / "o")  # fmt: skip


@pytest.mark.parametrize("option", ["hf", "file"])
def test_a_tokenizer_json_that_is_not_json_is_one_line_before_the_model_loads(option, tmp_path):
    from transformers import GPT2Config

    import modelxray

    GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100).save_pretrained(tmp_path / "m")
    (tmp_path / "m" / "tokenizer.json").write_text("{not json")
    key = "name_or_path" if option == "hf" else "path"
    with pytest.raises(ConfigError, match=rf"^model.{key}: '.*tokenizer.json' cannot be read as JSON"):
        modelxray.analyze(
            [f"model={option}", f"model.{key}={tmp_path / 'm'}", "tracker=none"], output_dir=tmp_path / "o"
        )


def test_a_text_too_short_to_score_is_one_line_before_the_weights(tmp_path, monkeypatch):
    """The tokenizer alone reads the text before the model loads: one token is nothing to score."""
    import modelxray
    from modelxray.models.tiny_gpt2 import TinyGPT2Source

    def never(*_a, **_k):
        raise AssertionError("the model loaded before the text was checked")

    monkeypatch.setattr(TinyGPT2Source, "load", never)
    (tmp_path / "one.txt").write_text("a")
    with pytest.raises(ConfigError, match=r"^dataset.paths: the text of .* is 1 token\(s\) long"):
        modelxray.analyze(["model=tiny_gpt2", "dataset=text_files", f"dataset.paths=[{tmp_path / 'one.txt'}]",
                           f"dataset.cache_dir={tmp_path}", "tracker=none"], output_dir=tmp_path / "o")  # fmt: skip


def test_a_tokenizer_beyond_the_models_vocabulary_is_one_line_before_the_weights(tmp_path, monkeypatch):
    """A GPT-2 of 50 tokens given the byte tokenizer (257 ids): the ids would index past the embedding."""
    from transformers import GPT2Config

    import modelxray
    from modelxray.models.hf import HFSource

    GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50, architectures=["GPT2LMHeadModel"]).save_pretrained(
        tmp_path / "m"
    )

    def never(*_a, **_k):
        raise AssertionError("the model loaded before the tokenizer was checked")

    monkeypatch.setattr(HFSource, "load", never)
    with pytest.raises(
        ConfigError, match=r"^model.tokenizer: the tokenizer gives ids up to \d+ on .*50-token vocabulary"
    ):
        modelxray.analyze(["model=hf", f"model.name_or_path={tmp_path / 'm'}", "model.tokenizer=byte",
                           "dataset.max_tokens=512", f"dataset.cache_dir={tmp_path}", "tracker=none"],
                          output_dir=tmp_path / "o")  # fmt: skip
