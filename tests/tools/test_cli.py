from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys

import pytest

from fastload.loader import auto_num_workers
from fastload.testing.synthetic import make_image_folder
from fastload.tools import commands
from fastload.tools.cli import main
from fastload.tools.demo import compare_loaders
from fastload.tools.measure import format_table, measure


def test_demo_prints_a_before_after_table_part_by_part_and_a_plot(capsys, tmp_path):
    plot = tmp_path / "demo.png"
    main(["demo", "--images-per-class", "2", "--repeats", "1", "--plot", str(plot)])
    out = capsys.readouterr().out
    assert "16 JPEGs of 500x375 to normalised 224 px batches" in out and "1 epoch each" in out
    assert "1. The loaders alone, no model:" in out  # what it times, the model step left out
    assert "before and after" not in out  # the README's script trains a model; this does not
    assert out.index("measuring...") < out.index("| classic")  # said before measured
    assert out.rstrip().endswith(f"wrote {plot}") and plot.stat().st_size > 1000
    assert "2. fastload.diagnose on a ResNet-18 training loop" in out
    assert "real loop: waiting for data" in out and "Recommendations:" in out
    assert "speed-up if loading were free" not in out
    rows = [line for line in out.splitlines() if line.startswith(("| classic", "| fastload"))]
    workers = auto_num_workers()
    assert len(rows) == 2 and all(f"| {workers} workers, to cpu |" in row for row in rows)
    assert re.search(r"\| 1\.00x +\|$", rows[0])
    assert "the README's results table (benchmarks: cpu/peers)" in out  # where to compare


def test_compare_loaders_reads_every_image_with_each_loader(tmp_path):
    root = make_image_folder(tmp_path, num_classes=2, images_per_class=3, size=(64, 48))
    runs = compare_loaders(root, batch_size=4, image_size=32, repeats=2)
    assert [run.name for run in runs] == [
        "classic: torchvision ImageFolder + PIL + DataLoader",
        "fastload: ImageFolder + FastLoader + DataPrefetcher",
    ]
    assert all(run.images == 6 and len(run.measurement.seconds) == 2 for run in runs)


def test_unknown_command_exits_with_usage(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["nope"])
    assert caught.value.code == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["convert", "data/train", "x.lmdb", "--resise", "256"],
            "fastload convert: error: unrecognized option: --resise (did you mean --resize?)",
        ),
        (
            ["bench", "data/train", "--wokers", "0,1", "--jsn"],
            "fastload bench: error: unrecognized options: --wokers (did you mean --workers?), "
            "--jsn",
        ),
    ],
)
def test_a_mistyped_option_is_named_by_its_command_with_the_closest(capsys, argv, said):
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == said


@pytest.mark.parametrize("converted", [True, False])
def test_an_interrupted_conversion_names_what_it_left_and_how_to_go_on(
    capsys, monkeypatch, tmp_path, converted
):
    destination = tmp_path / "train.lmdb"

    def interrupted(args):
        if converted:
            destination.write_bytes(b"part")
        raise KeyboardInterrupt

    monkeypatch.setattr(commands, "convert", interrupted)
    with pytest.raises(SystemExit) as caught:
        main(["convert", str(tmp_path), str(destination)])
    assert caught.value.code == 130
    said = capsys.readouterr().err.strip()
    if converted:
        assert said == (
            f"fastload convert: interrupted: {destination} keeps what was "
            "converted; the same command with --resume goes on from there"
        )
    else:
        assert said == f"fastload convert: interrupted: nothing was converted into {destination}"


def test_measure_counts_runs_and_rejects_bad_counts():
    calls = []
    result = measure(lambda: calls.append(1), repeats=3, warmup=2)
    assert len(calls) == 5 and len(result.seconds) == 3
    with pytest.raises(ValueError, match="need repeats >= 1"):
        measure(lambda: None, repeats=0)


def test_format_table_lines_up_columns():
    assert format_table(["a", "bb"], [[1, 2], ["xyz", 3]]).splitlines() == [
        "| a   | bb |",
        "|-----|----|",
        "| 1   | 2  |",
        "| xyz | 3  |",
    ]


@pytest.fixture(scope="module")
def small_folder(tmp_path_factory):
    return make_image_folder(
        tmp_path_factory.mktemp("cli"), num_classes=2, images_per_class=8, size=(64, 48)
    )


def test_diagnose_prints_a_json_report_and_a_timeline(small_folder, tmp_path, capsys):
    plot = tmp_path / "timeline.png"
    options = "--batch-size 4 --image-size 32 --batches 3 --warmup 1 --workers 0 --model resnet18"
    main(["diagnose", str(small_folder), *options.split(), "--json", "--plot", str(plot)])
    out = capsys.readouterr().out
    report = json.loads(out[: out.rindex("}") + 1])
    assert report["num_workers"] == 0 and report["batch_size"] == 4 and report["storage"] == "files"
    assert report["step_seconds"] > 0 and 0 <= report["wait_fraction"] <= 1
    assert report["recommendations"]
    # --batches 3 is fewer than the 5 a median and a spread need: said, not hidden
    assert (report["step_iterations"], report["loop_iterations"]) == (3, 3)
    assert report["loader_iterations"] == 3 and report["reliable"] is False
    first_problem = report["problems"][0]
    assert "the step on a cached batch was timed over 3 calls, fewer than 5" in first_problem
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_sweeps_workers_and_names_the_best(small_folder, tmp_path, capsys):
    plot = tmp_path / "workers.png"
    options = "--batch-size 4 --image-size 32 --batches 2 --workers 0,1 --prefetch 2"
    main(["bench", str(small_folder), *options.split(), "--plot", str(plot)])
    out = capsys.readouterr().out
    assert [
        line.split("|")[1].strip()
        for line in out.splitlines()
        if line.startswith("| ") and "num_workers" not in line
    ] == ["0", "1"]
    assert re.search(r"best: FastLoader\(num_workers=[01], prefetch_factor=2\)", out)
    assert plot.exists()
    first = plot.read_bytes()
    main(["bench", str(small_folder), *options.split(), "--plot", str(plot)])  # again
    assert plot.read_bytes() != first  # its own plot, replaced by the new one
    assert [p.name for p in tmp_path.iterdir()] == ["workers.png"]  # no temporary left


@pytest.mark.parametrize("command", ["diagnose", "bench"])
def test_a_plot_never_replaces_a_file_fastload_did_not_write(
    small_folder, tmp_path, command, capsys
):
    photo = next(small_folder.rglob("*.jpg"))
    before = photo.read_bytes()
    options = "--batch-size 4 --image-size 32 --batches 2 --workers 0"
    with pytest.raises(SystemExit) as stopped:
        main([command, str(small_folder), *options.split(), "--plot", str(photo)])
    assert stopped.value.code == 2
    assert f"{photo} exists and is not a plot fastload wrote" in capsys.readouterr().err
    assert photo.read_bytes() == before

    new_inside = small_folder / "chart.png"  # no file there yet: still inside the data
    with pytest.raises(SystemExit) as stopped:
        main([command, str(small_folder), *options.split(), "--plot", str(new_inside)])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert f"--plot {new_inside} is inside the data it measures ({small_folder})" in err
    assert not new_inside.exists()

    notes = tmp_path / "notes.pdf"  # the user's own file, outside the data
    notes.write_bytes(b"%PDF-1.4 the user's notes")
    with pytest.raises(SystemExit):
        main([command, str(small_folder), *options.split(), "--plot", str(notes)])
    assert notes.read_bytes() == b"%PDF-1.4 the user's notes"


USERS_SVG = """<?xml version="1.0" encoding="utf-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="200" height="40">
 <title>Loader speed-up</title>
 <text x="4" y="24">my notes on the fastload plot of last week</text>
</svg>
"""


@pytest.mark.parametrize("command", ["diagnose", "bench"])
def test_a_users_svg_that_mentions_a_fastload_plot_is_not_replaced(
    small_folder, tmp_path, command, capsys
):
    chart = tmp_path / "chart.svg"
    chart.write_text(USERS_SVG)
    options = "--batch-size 4 --image-size 32 --batches 2 --workers 0"
    with pytest.raises(SystemExit) as stopped:
        main([command, str(small_folder), *options.split(), "--plot", str(chart)])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == (
        f"fastload {command}: error: argument --plot: {chart} exists and is not a plot "
        "fastload wrote: it is left as it is; give the plot a new name\n"
    )
    assert chart.read_text() == USERS_SVG


@pytest.mark.parametrize("extension", ["png", "pdf", "svg", "eps"])
def test_a_plot_is_marked_as_fastloads_in_every_format_that_keeps_metadata(tmp_path, extension):
    from fastload.tools.plots import check_replaceable, plot_workers

    path = tmp_path / f"workers.{extension}"
    plot_workers({(0, 2): 1.0, (1, 2): 2.0}, path)
    check_replaceable(path)  # its own: may be replaced
    path.write_bytes(path.read_bytes().replace(b"fastload plot", b"someone else"))
    with pytest.raises(FileExistsError, match="is not a plot fastload wrote"):
        check_replaceable(path)


@pytest.mark.parametrize(("argv", "message"), [
    (["diagnose", "data", "--model", "resnet999"],
     "fastload diagnose: error: argument --model: 'resnet999' is not a torchvision"),
    (["diagnose", "data", "--image-size", "0"],
     "fastload diagnose: error: argument --image-size: must be a positive integer, got 0"),
    (["diagnose", "data", "--workers", "-1"],
     "fastload diagnose: error: argument --workers: must be >= 0, auto or tune, got -1"),
    (["bench", "data", "--prefetch", "2,x"],
     "fastload bench: error: argument --prefetch: must be comma-separated integers >= 1, got "
     "'2,x'"),
    (["convert", "a", "b", "--resize", "0"],
     "fastload convert: error: argument --resize: must be a positive integer, got 0"),
])  # fmt: skip
def test_bad_arguments_are_one_line_and_exit_2(capsys, argv, message):
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    """What garbage arguments point at: an image folder, a text file, an empty file, an
    empty folder, and a path that does not exist."""
    root = tmp_path_factory.mktemp("garbage")
    make_image_folder(root / "images", num_classes=2, images_per_class=1, size=(64, 48))
    (root / "notes.txt").write_text("not an image folder, not a database\n")
    (root / "empty").write_bytes(b"")
    (root / "folder").mkdir()
    return root


GARBAGE = [
    ("", "fastload: error: the following arguments are required: command"),
    ("convert", "the following arguments are required: source, destination"),
    ("convert {missing} {root}/a.lmdb", "{missing}: no such image folder"),
    ("convert {text} {root}/a.lmdb", "{text}: not a folder; give the image folder"),
    ("convert {images} {missing}/a.lmdb", "{missing}: no such directory to write a.lmdb"),
    ("convert {images} {text}",
     "{text} exists and is not an LMDB database; it is left as it is: give another destination"),
    ("convert {images} {text} --resume",
     "{text}: exists and is not an LMDB file, not a fastload database; it is left as it is"),
    ("convert {images} {empty} --resume", "{empty}: exists and is not an LMDB file"),
    ("convert {images} {folder}",
     "{folder} is a directory; give the path of the database file to write"),
    ("convert {images} {text} --shards",
     "{text}: a file is there; shards are written into a folder"),
    ("convert {images} {text}/sub --shards",
     "{text}/sub: cannot make the folder (Not a directory)"),
    ("convert {images} {images}", "{images} is a directory; give the path of the"),
    ("convert a b --resize -3", "argument --resize: must be a positive integer, got -3"),
    ("convert a b --resize nan", "argument --resize: must be a positive integer, got 'nan'"),
    ("convert a b --resize 1.5", "argument --resize: must be a positive integer, got '1.5'"),
    ("convert a b --quality 0", "argument --quality: must be a JPEG quality in 1..100, got 0"),
    ("convert a b --quality 101", "argument --quality: must be a JPEG quality in 1..100, got 101"),
    ("convert a b --quality NaN",
     "argument --quality: must be a JPEG quality in 1..100, got 'NaN'"),
    ("convert a b --workers -1", "argument --workers: must be >= 0, got -1"),
    ("convert a b --workers nan", "argument --workers: must be >= 0, got 'nan'"),
    ("convert {images} {root}/a.lmdb --annotations {missing}",
     "{missing}: no such annotation file"),
    ("convert {images} {root}/a.lmdb --annotations {folder}",
     "{folder}: a directory, not a file; give the COCO annotation file (JSON)"),
    ("convert {images} {root}/a.lmdb --annotations {text}", "{text}: not a JSON file"),
    ("convert {images} {root}/a.lmdb --masks {missing}", "{missing}: no such mask folder"),
    ("convert {images} {root}/a.lmdb --masks {text}", "{text}: not a folder; give the mask folder"),
    ("convert {images} {root}/a.lmdb --instance-masks",
     "instance_masks come from annotations: give the annotation file"),
    ("info {missing}", "{missing}: no such fastload database"),
    ("info {text}", "{text}: not an LMDB file, not a fastload database"),
    ("info {empty}", "{empty}: empty file, not a fastload database"),
    ("info {folder}", "{folder}: a directory without data.mdb, not a fastload database"),
    ("verify {text}", "{text}: not an LMDB file, not a fastload database"),
    ("verify {empty}", "{empty}: empty file, not a fastload database"),
    ("diagnose d --batch-size 0", "argument --batch-size: must be a positive integer, got 0"),
    ("diagnose d --batch-size nan", "argument --batch-size: must be a positive integer, got 'nan'"),
    ("diagnose d --image-size -1", "argument --image-size: must be a positive integer, got -1"),
    ("diagnose d --batches 0", "argument --batches: must be a positive integer, got 0"),
    ("diagnose d --warmup -1", "argument --warmup: must be >= 0, got -1"),
    ("diagnose d --workers many", "argument --workers: must be >= 0, auto or tune, got 'many'"),
    ("diagnose d --plot {missing}/p.png",
     "argument --plot: {missing}: no such directory to write p.png in"),
    ("diagnose d --plot {folder}",
     "argument --plot: {folder} is a directory; give the image file to write, e.g. "
     "{folder}/plot.png"),
    ("diagnose d --plot {root}/p.xyz", "argument --plot: p.xyz: name the plot with one of"),
    ("diagnose {missing} --model none", "{missing}: no such image folder"),
    ("diagnose {text} --model none", "{text}: not an LMDB file, not a fastload database"),
    ("bench d --prefetch 0", "argument --prefetch: must be comma-separated integers >= 1, got '0'"),
    ("bench d --workers -1", "argument --workers: must be comma-separated integers >= 0"),
    ("bench d --workers 1,,2",
     "argument --workers: must be comma-separated integers >= 0, got '1,,2'"),
    ("bench d --batches 0", "argument --batches: must be a positive integer, got 0"),
    ("bench d --plot {missing}/w.png", "argument --plot: {missing}: no such directory"),
    ("bench {missing}", "{missing}: no such image folder"),
    ("demo --images-per-class 0", "argument --images-per-class: must be a positive integer"),
    ("demo --repeats -1", "argument --repeats: must be a positive integer, got -1"),
    ("demo --plot {missing}/d.png", "argument --plot: {missing}: no such directory"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "message"), GARBAGE, ids=[argv for argv, _ in GARBAGE])
def test_garbage_is_one_line_on_stderr_and_exit_2(places, capsys, argv, message):
    where = {
        "root": places, "images": places / "images", "text": places / "notes.txt",
        "empty": places / "empty", "folder": places / "folder", "missing": places / "missing",
    }  # fmt: skip
    with pytest.raises(SystemExit) as stopped:
        main([part.format(**where) for part in argv.split()])
    out, err = capsys.readouterr()
    command = argv.split()[0] if argv else None
    prefix = f"fastload {command}: error: " if command else ""
    assert stopped.value.code == 2 and err.count("\n") == 1 and not out, err
    assert err.startswith(prefix + message.format(**where)), err
    assert not (places / "a.lmdb").exists() and not (places / "a.lmdb-lock").exists()
    assert (places / "notes.txt").read_text().startswith("not an image folder")
    assert (places / "empty").read_bytes() == b"" and not (places / "empty-lock").exists()


@pytest.mark.parametrize("shards", [True, False], ids=["shards", "lmdb"])
def test_an_empty_hugging_face_set_is_refused_naming_it(tmp_path, capsys, shards):
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    empty = datasets.Dataset.from_dict({"image": [], "label": []}, features=features)
    empty.save_to_disk(tmp_path / "set")
    datasets.DatasetDict(train=empty).save_to_disk(tmp_path / "splits")
    capsys.readouterr()  # the saves' progress bars
    for saved, named in (("set", "set"), ("splits", "splits/train")):
        out = tmp_path / f"{saved}-out"
        with pytest.raises(SystemExit) as stop:
            main(["convert", f"hf:{tmp_path / saved}", str(out), *(["--shards"] * shards)])
        error = capsys.readouterr().err
        assert stop.value.code == 2 and error == (
            f"fastload convert: error: {tmp_path / named}: an empty Hugging Face set (saved "
            "with no rows): no images, nothing to convert\n"
        )
        assert not out.exists()


@pytest.fixture(scope="module")
def databases(places, tmp_path_factory):
    """Databases diagnose and bench cannot measure a classifier on: detection targets,
    labels without class names, no records (every file skipped)."""
    from fastload import write_lmdb
    from fastload.testing.shapes import ShapesDetection

    root = tmp_path_factory.mktemp("databases")
    write_lmdb(ShapesDetection(2, size=(32, 32)), root / "det.lmdb", num_workers=0, progress=False)
    files = [(path, 7) for path in sorted((places / "images").rglob("*.jpg"))]
    write_lmdb(files, root / "list.lmdb", num_workers=0, progress=False)
    (root / "bad.jpg").write_bytes(b"not a JPEG")
    write_lmdb(
        [(root / "bad.jpg", 0)], root / "empty.lmdb", skip_bad=True, num_workers=0, progress=False
    )
    return root


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            "bench {root}/det.lmdb",
            "{root}/det.lmdb: its records hold targets (boxes, labels, "
            "masks); diagnose and bench measure image classification data (images and labels)",
        ),
        ("diagnose {root}/det.lmdb --model none", "{root}/det.lmdb: its records hold targets"),
        (
            "diagnose {root}/list.lmdb",
            "{root}/list.lmdb: no class names, so no number of classes "
            "for --model resnet18's output; pass --model none to measure the loading alone",
        ),
        ("bench {root}/empty.lmdb", "{root}/empty.lmdb: no images to measure"),
    ],
)
def test_data_diagnose_and_bench_cannot_measure_is_refused_before_measuring(
    databases, capsys, argv, message
):
    with pytest.raises(SystemExit) as stopped:
        main(argv.format(root=databases).split())
    out, err = capsys.readouterr()
    command = argv.split()[0]
    assert stopped.value.code == 2 and not out and err.count("\n") == 1, err
    assert err.startswith(f"fastload {command}: error: " + message.format(root=databases)), err


def test_an_unexpected_error_is_one_line_with_its_type():
    from fastload.tools.cli import _one_line

    assert _one_line(AssertionError("prefetch_factor must be\ngreater than 0")) == (
        "AssertionError: prefetch_factor must be greater than 0"
    )
    assert _one_line(KeyError("boxes")) == "KeyError: 'boxes'"
    assert _one_line(FileNotFoundError("x: no such image folder")) == "x: no such image folder"
    assert _one_line(RuntimeError()) == "RuntimeError"
    bug = IndexError("list index out of range")
    bug.add_note("(converting Lies[3], item 3 of the source)")
    assert _one_line(bug) == (
        "IndexError: list index out of range (converting Lies[3], item 3 of the source)"
    )


def test_diagnose_warns_in_one_line_when_a_batch_is_larger_than_the_data(tmp_path, capsys):
    data = make_image_folder(tmp_path / "few", num_classes=2, images_per_class=2, size=(64, 48))
    options = "--batch-size 8 --image-size 32 --batches 2 --warmup 0 --workers 0 --model none"
    main(["diagnose", str(data), *options.split()])
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == [
        "fastload diagnose: warning: a batch of 8 from a data set of 4: every batch is the "
        "whole data set, smaller than the batch your training uses; measure with more data "
        "or a smaller batch"
    ]


def test_a_corrupt_image_in_a_worker_is_its_own_error_line_not_the_workers_traceback(
    tmp_path, capsys
):
    data = make_image_folder(tmp_path / "bad", num_classes=1, images_per_class=4, size=(64, 48))
    broken = data / "class_00" / "img_00002.jpg"
    broken.write_bytes(b"\xff\xd8 not really a jpeg")
    options = "--batch-size 4 --image-size 32 --batches 1 --warmup 0 --workers 1 --model none"
    with pytest.raises(SystemExit) as exited:
        main(["diagnose", str(data), *options.split()])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert line.startswith(f"fastload diagnose: error: {broken}: not an image OpenCV can decode")
    assert "Traceback" not in line and "worker process" not in line


def test_every_option_of_every_command_says_what_it_does_and_its_default():
    from fastload.tools.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    silent, no_default = [], []
    for name, parser in commands.items():
        for action in parser._actions:
            if not action.option_strings or action.option_strings[0] == "-h":
                continue
            if not action.help:
                silent.append(f"{name} {action.option_strings[0]}")
            elif action.default not in (None, False) and "default" not in action.help:
                no_default.append(f"{name} {action.option_strings[0]}")
    assert silent == [] and no_default == []


def test_version_prints_the_installed_packages_version_on_one_line(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"fastload {importlib.metadata.version('fastload')}\n"


#: The start of a command pays for torch only: these load on first use, by what needs them
#: (torchvision loads its models on import)
HEAVY = {"torchvision", "albumentations", "matplotlib", "datasets", "boto3", "ray", "timm"}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("commands", "allowed"),
    [
        ([["info", "{lmdb}"], ["info", "{shards}"]], set()),
        ([["verify", "{lmdb}"], ["verify", "{shards}"]], set()),
        (  # the loading alone: albumentations augments it, no torchvision model trains
            [
                [
                    "diagnose",
                    "{lmdb}",
                    "--model",
                    "none",
                    "--seconds",
                    "1",
                    "--batches",
                    "1",
                    "--warmup",
                    "0",
                    "--workers",
                    "0",
                    "--batch-size",
                    "4",
                ]
            ],
            {"albumentations"},
        ),
    ],
    ids=["info", "verify", "diagnose-model-none"],
)
def test_a_command_imports_only_what_it_uses(small_folder, tmp_path, commands, allowed):
    from fastload.lmdb import write_lmdb
    from fastload.shards import write_shards

    places = {"lmdb": str(tmp_path / "small.lmdb"), "shards": str(tmp_path / "shards")}
    write_lmdb(small_folder, places["lmdb"], num_workers=0)
    write_shards(small_folder, places["shards"])
    argvs = [[word.format(**places) for word in argv] for argv in commands]
    script = (
        "import sys\n"
        "from fastload.tools.cli import main\n"
        f"for argv in {argvs!r}:\n"
        "    main(argv)\n"
        "print(json.dumps(sorted({name.split('.')[0] for name in sys.modules})))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", f"import json\n{script}"], capture_output=True, text=True,
        check=True, timeout=300,
    )  # fmt: skip
    loaded = set(json.loads(run.stdout.strip().splitlines()[-1]))
    assert "torch" in loaded  # the commands ran: what they read is torch's
    assert HEAVY & loaded == allowed
