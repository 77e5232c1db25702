"""Size bounds on a user's YAML config files, checked before Hydra reads them.

YAML aliases let a few lines stand for a huge tree (`a1: [*a0, *a0, ...]`, ten levels deep: 10^10 leaves): PyYAML
shares the aliased nodes, but Hydra's composition copies every node, so such a file takes all memory and never
finishes. Each file is composed here into PyYAML's node graph (cheap: aliases stay shared) and the tree it stands
for is counted without expanding it; a file over the bounds is one line naming it.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from train_embodied.config.build import ConfigError

#: the largest config file read (bytes); the shipped configs are a few kB
MAX_FILE_BYTES = 1 << 20
#: the most nodes a file may stand for with its aliases expanded; the shipped configs have a few hundred
MAX_EXPANDED_NODES = 100_000


def check_yaml_bounds(path: Path) -> None:
    """Refuse `path` if it is larger than `MAX_FILE_BYTES`, nests deeper than the YAML parser allows, or stands for
    more than `MAX_EXPANDED_NODES` nodes once its aliases are expanded.

    Raises:
        ConfigError: one line naming the file and the bound.
    """
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ConfigError(
            [f"{path}: {size} bytes is larger than a config file may be ({MAX_FILE_BYTES} bytes)"]
        )
    try:
        root = yaml.compose(path.read_text(), Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return  # a syntax error: Hydra's own read reports it with its line and column
    except RecursionError:
        raise ConfigError([f"{path}: nests deeper than the YAML parser allows"]) from None
    try:
        too_big = root is not None and _expanded_size(root, {}) > MAX_EXPANDED_NODES
    except RecursionError:
        raise ConfigError([f"{path}: nests deeper than a config can"]) from None
    if too_big:
        raise ConfigError(
            [
                f"{path}: its YAML aliases expand to more than {MAX_EXPANDED_NODES} nodes (an alias bomb?); "
                "write the values out or use ${...} interpolations"
            ]
        )


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """Nodes in the tree `node` stands for, each alias counted as a full copy (memoised per node: an alias is
    the same node object as its anchor, so shared subtrees are counted once and multiplied, never walked again).
    Stops growing once past the bound."""
    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = (
        MAX_EXPANDED_NODES + 1
    )  # a node reached again while it is counted: a cycle, refused as too big
    total = 1
    if isinstance(node, yaml.SequenceNode):
        children = node.value
    elif isinstance(node, yaml.MappingNode):
        children = [part for pair in node.value for part in pair]
    else:
        children = []
    for child in children:
        total += _expanded_size(child, memo)
        if total > MAX_EXPANDED_NODES:
            break
    memo[key] = total
    return total


def check_user_config(path: Path) -> None:
    """`check_yaml_bounds` for a user's config file and every file of its folder that its `defaults` lists name
    (another config of the folder, a config group option such as `env/my_env.yaml`), recursively: the files Hydra
    reads from that folder."""
    root = path.parent
    queue, seen = [path], set()
    while queue:
        file = queue.pop()
        if file in seen or not file.is_file():
            continue
        seen.add(file)
        check_yaml_bounds(file)
        try:
            data = yaml.safe_load(file.read_text())  # bounded now; aliases stay shared references
        except yaml.YAMLError:
            continue  # Hydra reports it with its line and column
        defaults = data.get("defaults") if isinstance(data, dict) else None
        for entry in defaults if isinstance(defaults, list) else []:
            if isinstance(entry, str) and entry != "_self_":
                queue.append(root / f"{entry}.yaml")
            elif isinstance(entry, dict):
                for key, option in entry.items():
                    group = str(key).removeprefix("override ").split("@")[0].strip()
                    if isinstance(option, str) and group:
                        queue.append(root / group / f"{option}.yaml")
