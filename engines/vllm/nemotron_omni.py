"""Nemotron-3-Nano-Omni (NemotronH_Nano_Omni_Reasoning_V3) over a stated family, for want of a config.json found.

No config.json of nvidia/Nemotron-3-Nano-Omni-30B-A3B-Reasoning was found. NVIDIA's NeMo AutoModel docs describe it as
"NemotronH (hybrid Mamba-2 + Attention) MoE language backbone with a RADIO v2.5-H vision encoder and a Parakeet
(FastConformer) sound encoder", architecture NemotronH_Nano_Omni_Reasoning_V3, "30B total / 3B active"
(https://docs.nvidia.com/nemo/automodel/model-coverage/omni/nvidia/nemotron-omni), and transformers 5.20.2 reads such a
checkpoint through NemotronH_Omni_Reasoning_V3_Config (model_type nemotron_h_omni, its docstring naming
nvidia/Nemotron-3-Nano-Omni-30B-A3B-Reasoning-BF16; models/nemotron_h_omni/configuration_nemotron_h_omni.py:28, :56),
whose text_config is a NemotronHConfig. No source gives the Omni model's own text config. What `verify engine vllm`
plans is therefore a family (engines/families.py) of one member: that model type and architecture, and as its
text_config, assumed, the published config.json of the text-only NemotronH MoE model of the same line and size,
nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16, which the catalog plans as `nemotron-3-nano-30b-a3b-bf16`
(engines/vllm/models/SOURCES.md), key for key but its auto_map (remote code the transformers class does not need)
and transformers_version: a sibling's values, so the member is never a verdict on the Omni checkpoint.

What vLLM 0.33.0 reads of this class to plan (vllm/model_executor/models/nano_nemotron_vl.py, the one class of the
four registry names, registry.py:550-553): the language model is NemotronHForCausalLM built from text_config
(`init_vllm_registered_model`, :985-990) under the prefix `language_model`, so its layers are Nemotron-H's under
`language_model.`; the state shape and dtype the hybrid alignment pads by are NemotronHForCausalLM's of the text
config (:1734-1743); the class is not SupportsPP (:928-936), so no pipeline stages. The SSM state's dtype at
--mamba-ssm-cache-dtype auto is set by the config hooks vLLM looks up by the architecture it resolved
(config/vllm.py:2744, :2754-2762): NemotronHForCausalLM's and NemotronH_Nano_VL_V2's set it to the text config's
mamba_ssm_cache_dtype, float32 where it has none ("Only `float32` is known to have no accuracy issues by default",
model_executor/models/config.py:812-848, :1251, :1253), and no hook is registered for this name, so the state stays
in the model dtype (docs/findings/vllm-0.33.0.md, Nemotron-3-Nano-Omni over its family).

Speculation: vLLM lifts the text config out for MTP detection for the Super Omni and Omni names only
(config/speculative.py:888-893), not for this one, so it drafts with no MTP module whatever its text config holds (the
sibling's has no MTP layers either); the class's EAGLE3 drafts (SupportsEagle3, :932) are checkpoints of their own,
none found: ngram, up to 3 tokens.

Strictness, as for the other families: a member's config.json is exactly the cited keys, and
tests/test_vllm_nemotron_omni.py changes every key transformers' NemotronH_Omni_Reasoning_V3_Config and its text
config answer for the member at once (those None by default, lists and mappings left as they are, and
video_temporal_patch_size, which the class requires equal to its vision config's) and shows a tensor-parallel,
prefix-caching, speculating point plans exactly as before.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from kvproof.engines.families import Cited, Family, Member

SIBLING = "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"
SIBLING_FILE = "vllm/models/nemotron-3-nano-30b-a3b-bf16.json"
AUTOMODEL = ("NVIDIA's NeMo AutoModel docs for it (https://docs.nvidia.com/nemo/automodel/model-coverage/omni/nvidia/"
             "nemotron-omni: \"Architecture NemotronH_Nano_Omni_Reasoning_V3\", \"a NemotronH (hybrid Mamba-2 + "
             "Attention) MoE language backbone\", \"30B total / 3B active\")")
OMNI_CONFIG = ("transformers 5.20.2's NemotronH_Omni_Reasoning_V3_Config (models/nemotron_h_omni/"
               "configuration_nemotron_h_omni.py:28, :56, `@auto_docstring(checkpoint=\"nvidia/"
               "Nemotron-3-Nano-Omni-30B-A3B-Reasoning-BF16\")`; the checkpoint's own remote-code model type is not "
               "planned)")
# The sibling's keys the member leaves out: the remote code transformers' own class makes unneeded, and bookkeeping
LEFT_OUT = frozenset({"auto_map", "transformers_version"})
T = "text_config."


def _sibling() -> dict[str, Any]:
    text = resources.files("kvproof.engines").joinpath(SIBLING_FILE).read_text(encoding="utf-8")
    return {key: value for key, value in json.loads(text).items() if key not in LEFT_OUT}


FAMILY = Family(
    name="nemotron-3-nano-omni",
    not_a_verdict_on="nvidia/Nemotron-3-Nano-Omni-30B-A3B-Reasoning-BF16",
    cited=(
        Cited("architectures", ["NemotronH_Nano_Omni_Reasoning_V3"],
              f"vLLM's registry name for the class (vllm/model_executor/models/registry.py:551); {AUTOMODEL}"),
        Cited("model_type", "nemotron_h_omni", OMNI_CONFIG),
        *(Cited(T + key, value, f"assumed: {SIBLING}'s published config.json (engines/{SIBLING_FILE}), the "
                f"text-only NemotronH MoE model of the Omni checkpoint's line and size, a sibling's value (no source "
                f"gives the Omni model's own text config); the backbone's kind and size from {AUTOMODEL}")
          for key, value in _sibling().items()),
    ),
    axes=(),
    cap=1,
)

MEMBERS: tuple[Member, ...] = tuple(FAMILY.members())

