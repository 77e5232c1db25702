import pytest
import torch

from vla_models import PrismaticConfig, VisionTowerConfig
from vla_models.prismatic.modeling_prismatic import PrismaticBackbone, _run_tower
from vla_models.prismatic.sequence_layout import build_attention_mask, position_ids_from


def test_tower_features_are_second_to_last_block_patches() -> None:
    cfg = PrismaticConfig.tiny()
    m = PrismaticBackbone(cfg).eval()
    images = torch.randint(0, 256, (2, 64, 64, 3), dtype=torch.uint8)
    pix = m.pixel_values(images)
    with torch.no_grad():
        for i, (tcfg, tower) in enumerate(m.vision_backbone.towers()):
            ref = tower(pix[i], output_hidden_states=True).hidden_states[-2]
            prefix = 1 + tcfg.num_registers if tcfg.kind == "dinov2_reg" else 0
            assert torch.equal(_run_tower(tcfg, tower, pix[i], None, None), ref[:, prefix:])
        assert m.image_tokens(images).shape == (2, cfg.num_patches, cfg.text.hidden_size)


def test_image_resize_and_normalisation() -> None:
    m = PrismaticBackbone(PrismaticConfig.tiny(image_size=32, patch_size=8))
    white = torch.full((1, 48, 48, 3), 255, dtype=torch.uint8)
    pix = m.pixel_values(white)
    assert pix.shape == (2, 1, 3, 32, 32)
    assert torch.allclose(pix[1], torch.ones_like(pix[1]), atol=1e-5)  # siglip: (1 - 0.5) / 0.5
    assert torch.allclose(pix[0][0, 0], torch.full((32, 32), (1 - 0.485) / 0.229), atol=1e-4)
    with pytest.raises(ValueError, match="uint8"):
        m.pixel_values(white.float())


def test_openvla_7b_parameter_count_on_meta() -> None:
    with torch.device("meta"):
        m = PrismaticBackbone(PrismaticConfig.openvla_7b())
    n = sum(p.numel() for p in m.parameters())
    assert 7.45e9 < n < 7.65e9, n
    assert m.language_model.get_input_embeddings().weight.shape == (32064, 4096)
    assert m.projector.fc1.weight.shape == (8704, 2176)


def test_config_validation_names_the_problem() -> None:
    with pytest.raises(ValueError, match="kind='clip'"):
        VisionTowerConfig(kind="clip", hidden_size=8, num_layers=2, num_heads=2, mlp_dim=16, patch_size=4)
    with pytest.raises(ValueError, match="not divisible by patch_size"):
        PrismaticConfig.tiny(image_size=60, patch_size=8)


def test_padding_inside_the_row_is_invisible() -> None:
    """A row's hidden states do not depend on how much padding sits before its text."""
    m = PrismaticBackbone(PrismaticConfig.tiny()).eval()
    h = m.cfg.text.hidden_size
    emb = torch.randn(1, 6, h)
    padded = torch.cat([emb[:, :2], torch.randn(1, 3, h), emb[:, 2:]], dim=1)
    valid = torch.tensor([[True, True, False, False, False, True, True, True, True]])
    with torch.no_grad():
        ref, _ = m.decode(
            emb,
            build_attention_mask(torch.ones(1, 6, dtype=torch.bool), 2, bidirectional=True),
            position_ids_from(torch.ones(1, 6, dtype=torch.bool)),
        )
        out, _ = m.decode(
            padded, build_attention_mask(valid, 2, bidirectional=True), position_ids_from(valid)
        )
    torch.testing.assert_close(out[:, valid[0]], ref, atol=1e-5, rtol=1e-5)


def test_bidirectional_mask_only_among_slots() -> None:
    valid = torch.tensor([[True, False, True, True, True]])
    mask = build_attention_mask(valid, 2, bidirectional=True)[0, 0]
    assert mask[3, 4] and mask[4, 3]  # slots see each other
    assert not mask[2, 3]  # the prefix never sees the slots
    assert not mask[3, 1] and mask[1, 1]  # padding is invisible, but sees itself
    causal = build_attention_mask(valid, 2, bidirectional=False)[0, 0]
    assert not causal[3, 4]
