"""Tokenizers: the real one from a checkpoint directory, or a tiny byte-level BPE built in code (offline).

The tiny tokenizer has ``<unk>=0, <s>=1, </s>=2``, then a byte-level BPE trained deterministically on a fixed robot-instruction corpus up to ``vocab_size - n_bins`` ids, then
``n_bins`` action tokens ``<act_i>`` that text never produces, so the action bins are the last ``n_bins`` ids
of a ``vocab_size`` vocabulary exactly as in Llama-2/OpenVLA. ``<pad>`` is added after them (id ``vocab_size``).
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from vla_models.checkpoint_files import read_json

_CORPUS = [
    "In: What action should the robot take to {}?\nOut:",
    "pick up the object and place it on the plate",
    "put the spoon on the towel",
    "put carrot on plate",
    "stack the green block on the yellow block",
    "open the drawer",
    "close the drawer",
    "push the button",
    "press the button from the top",
    "reach the goal position",
    "push the puck to the goal",
    "pick and place the puck",
    "open the door",
    "close the door",
    "open the window",
    "close the window",
    "turn on the faucet",
    "turn off the faucet",
    "insert the peg into the hole",
    "slide the plate into the cabinet",
    "lift the cup and put it in the basket",
    "place the empty cup on the coaster",
    "adjust the bottle",
    "grasp the handle and pull",
    "move the bowl to the left of the stove",
    "put both the alphabet soup and the tomato sauce in the basket",
    "turn on the stove and put the moka pot on it",
    "put the black bowl in the bottom drawer of the cabinet and close it",
    "pick up the red cube and move it to the green target",
    "hammer the nail",
    "sweep the puck into the hole",
    "press the handle down",
    "lever pull",
    "dial turn",
    "assemble the nut onto the peg",
    "disassemble the nut from the peg",
    "basketball: put the ball into the hoop",
    "coffee button push, coffee pull, coffee push",
    "plate slide back side",
    "shelf place, stick pull, stick push, soccer, box close, bin picking",
    "0 1 2 3 4 5 6 7 8 9 , . ? ! : ; - _ ( ) ' \"",
]


# MetaWorld MT50 instructions (as vla_envs words them), so CPU quickstart prompts stay short
_METAWORLD = [
    "close the door",
    "grasp the stick and pull the box with it",
    "grasp the stick and push the box with it",
    "insert the gripper into the hole",
    "insert the peg sideways into the hole",
    "kick the ball into the goal",
    "lock the door by turning the lock down",
    "open the door",
    "pick the nut off the peg",
    "pick the puck up out of the hole",
    "pick up the ball and dunk it into the basket",
    "pick up the hammer and hammer the nail into the wall",
    "pick up the lid and place it on top of the box",
    "pick up the nut and place it onto the peg",
    "pick up the puck and place it at the goal",
    "pick up the puck and place it at the goal behind the wall",
    "pick up the puck and place it onto the shelf",
    "pick up the puck from one bin and place it into the other bin",
    "press the button behind the wall",
    "press the button behind the wall from the top",
    "press the button facing the robot",
    "press the button from the top",
    "press the handle down",
    "press the handle down sideways",
    "pull the drawer open",
    "pull the handle up",
    "pull the handle up sideways",
    "pull the lever up",
    "pull the mug away from the coffee machine",
    "push the button on the coffee machine",
    "push the drawer closed",
    "push the mug under the coffee machine",
    "push the puck around the wall to the goal",
    "push the puck back to the goal",
    "push the puck to the goal",
    "push the window closed",
    "push the window open",
    "reach the goal position",
    "reach the goal position behind the wall",
    "rotate the dial 180 degrees",
    "rotate the faucet handle to the left to open it",
    "rotate the faucet handle to the right to close it",
    "slide the plate back out of the cabinet",
    "slide the plate into the cabinet",
    "slide the plate sideways into the cabinet",
    "slide the plate sideways out of the cabinet",
    "sweep the puck into the hole",
    "sweep the puck off the table",
    "unlock the door by turning the lock up",
    "unplug the peg sideways from the hole",
]


def build_tiny_tokenizer(*, vocab_size: int = 1024, n_bins: int = 256) -> PreTrainedTokenizerFast:
    """A deterministic byte-level BPE tokenizer whose last ``n_bins`` ids (of ``vocab_size``) are action tokens.

    Args:
        vocab_size: tokenizer vocabulary size including the action tokens (the pad token comes after).
        n_bins: number of action tokens at the tail.
    """
    n_text = vocab_size - n_bins
    if n_text < 256 + 3:
        raise ValueError(
            f"vocab_size - n_bins = {n_text} must be >= 259 (256 byte symbols + <unk> <s> </s>); "
            f"got vocab_size={vocab_size}, n_bins={n_bins}"
        )
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=n_text,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    prompts = [_CORPUS[0].format(x) for x in _CORPUS[1:] + _METAWORLD]
    tok.train_from_iterator(_CORPUS + _METAWORLD + prompts, trainer=trainer)
    vocab = tok.get_vocab()
    # a small corpus may end before n_text merges: fill with unused tokens so the action ids land exactly
    for i in range(len(vocab), n_text):
        vocab[f"<unused_{i}>"] = i
    for b in range(n_bins):
        vocab[f"<act_{b}>"] = n_text + b
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in _merges(tok)]
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=bpe, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    assert fast.convert_tokens_to_ids("<pad>") == vocab_size, "pad must follow the action tokens"
    return fast


def _merges(tok: Tokenizer) -> list:
    import json

    return json.loads(tok.to_str())["model"]["merges"]


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    """Load tokenizer files from a local checkpoint directory (no download, no remote code).

    ``tokenizer.json`` (present in OpenVLA checkpoints and in ours) is read directly as a fast tokenizer;
    otherwise ``AutoTokenizer`` handles e.g. a SentencePiece ``tokenizer.model``.
    """
    p = Path(path)
    fast = (p / "tokenizer.json").exists()
    if not fast and not (p / "tokenizer.model").exists():
        raise FileNotFoundError(f"{p} has no tokenizer (tokenizer.json or tokenizer.model)")
    for name in TOKENIZER_JSON_FILES:
        if (p / name).exists():
            d = read_json(p / name, expect=dict)
            if name == "tokenizer.json" and not isinstance(d.get("model"), dict):
                raise ValueError(f"{p / name} has no 'model' object: it is not a tokenizers file")
    try:
        if fast:
            return PreTrainedTokenizerFast.from_pretrained(str(p), local_files_only=True)
        return AutoTokenizer.from_pretrained(str(p), local_files_only=True, trust_remote_code=False)
    except Exception as e:  # transformers / tokenizers raise many types for a malformed field
        files = ", ".join(n for n in (*TOKENIZER_JSON_FILES, "tokenizer.model") if (p / n).exists())
        detail = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ValueError(
            f"{p}: the tokenizer files ({files}) do not load: {type(e).__name__}: {detail}"
        ) from None


#: the JSON files a tokenizer folder may hold (each must be a JSON object)
TOKENIZER_JSON_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
