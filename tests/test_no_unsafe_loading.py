"""Nothing in the tree unpickles untrusted files or runs a model folder's code: every `torch.load` passes
`weights_only=True` and `trust_remote_code` is never enabled, in every Python file (sources, tests, scripts,
benchmarks), this file excepted; and the product's sources (packages' and apps' `src/`) read no file with pickle at
all: no `pickle.load`, no PyTorch DCP loader (whose metadata is a pickle), no `numpy.load(allow_pickle=True)`.
Tests may unpickle what they built themselves (a hostile payload shown to be live)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOAD = re.compile(r"\btorch\s*\.\s*load\s*\(")
REMOTE_CODE = re.compile(r"trust_remote_code")
SAFE_REMOTE_CODE = re.compile(r"trust_remote_code\s*=\s*False\b")
LOAD_ALIAS = re.compile(r"from\s+torch\s+import\s+[^\n]*\bload\b")
#: readers of pickle data, refused in the product's sources whatever the file
PICKLE_READERS = {
    re.compile(r"\b(?:c?pickle|cloudpickle|dill|joblib)\s*\.\s*(?:load|loads|Unpickler)\b"): "unpickles data",
    re.compile(r"\bdcp\s*\.\s*load\b|\bFileSystemReader\b|\b_load_state_dict_from_keys\b"): (
        "PyTorch DCP loader (reads its metadata with pickle)"
    ),
    re.compile(r"torch\.distributed\.checkpoint\s+import\s+[^\n]*\bload\b"): "PyTorch DCP loader",
    re.compile(r"allow_pickle\s*=\s*True"): "numpy.load(allow_pickle=True) unpickles object arrays",
}


def _python_files() -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        files = [ROOT / line for line in out.splitlines() if line]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an sdist)
        files = [p for p in ROOT.rglob("*.py") if not any(part.startswith(".") for part in p.parts)]
    return [p for p in files if p.is_file() and p.resolve() != Path(__file__).resolve()]


def _call_args(text: str, open_paren: int) -> str:
    """The text between the parenthesis at `open_paren` and its match."""
    depth = 0
    for i in range(open_paren, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[open_paren + 1 : i]
    return text[open_paren + 1 :]


def unsafe_lines(path: Path) -> list[str]:
    """`file:line: what` for every unsafe load in `path`."""
    text = path.read_text(errors="replace")
    found = []
    for m in LOAD.finditer(text):
        if not re.search(r"\bweights_only\s*=\s*True\b", _call_args(text, m.end() - 1)):
            found.append((m.start(), "torch.load without weights_only=True"))
    for m in LOAD_ALIAS.finditer(text):
        found.append(
            (m.start(), "torch.load imported under another name (call torch.load(..., weights_only=True))")
        )
    for m in REMOTE_CODE.finditer(text):
        if not SAFE_REMOTE_CODE.match(text, m.start()):
            found.append((m.start(), "trust_remote_code (only trust_remote_code=False is allowed)"))
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return [f"{rel}:{text.count(chr(10), 0, pos) + 1}: {what}" for pos, what in found]


def pickle_reader_lines(path: Path) -> list[str]:
    """`file:line: what` for every pickle reader in `path` (applied to the product's sources)."""
    text = path.read_text(errors="replace")
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return [
        f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: {what}"
        for pattern, what in PICKLE_READERS.items()
        for m in pattern.finditer(text)
    ]


def _product_sources(files: list[Path]) -> list[Path]:
    return [
        p
        for p in files
        if "src" in p.relative_to(ROOT).parts[:4] and "tests" not in p.relative_to(ROOT).parts
    ]


def test_the_product_reads_no_pickle() -> None:
    sources = _product_sources(_python_files())
    assert len(sources) > 30 and any(p.name == "checkpoint.py" for p in sources)
    problems = [line for path in sources for line in pickle_reader_lines(path)]
    assert not problems, "\n".join(problems)


def test_the_pickle_scan_finds_each_reader(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import pickle\n"
        "a = pickle.load(f)\n"
        "b = pickle.loads(data)\n"
        "dcp.load(state, checkpoint_id=p)\n"
        "m = dcp.FileSystemReader(p).read_metadata()\n"
        "from torch.distributed.checkpoint import load\n"
        "x = np.load(p, allow_pickle=True)\n"
        "y = json.loads(t)\n"
    )
    assert [line.split(":")[1] for line in pickle_reader_lines(bad)] == ["2", "3", "4", "5", "6", "7"]


def test_no_unsafe_loading_in_the_tree() -> None:
    files = _python_files()
    assert len(files) > 50  # the scan sees the tree
    problems = [line for path in files for line in unsafe_lines(path)]
    assert not problems, "\n".join(problems)


def test_the_scan_finds_each_unsafe_form(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import torch\n"
        "a = torch.load('x.pt')\n"
        "b = torch.load(\n    'y.pt', map_location='cpu'\n)\n"
        "c = torch.load('z.pt', weights_only=False)\n"
        "d = torch.load('w.pt', weights_only=True)\n"
        "m = AutoModel.from_pretrained(p, trust_remote_code=True)\n"
        "t = AutoTokenizer.from_pretrained(p, trust_remote_code=False)\n"
        "from torch import load\n"
    )
    lines = unsafe_lines(bad)
    assert [line.split(":")[1] for line in lines] == ["2", "3", "6", "10", "8"]
