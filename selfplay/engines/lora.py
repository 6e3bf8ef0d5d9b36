"""LoRA as every engine and the learner build it: one shape (``LoraSpec``), from the config
(``lora_spec``), attached as named adapters (``attach_adapters``), so weights sync one to one."""

from __future__ import annotations

from dataclasses import dataclass

from selfplay.config import LORA_TARGETS


@dataclass(frozen=True)
class LoraSpec:
    """LoRA shape shared by the learner and every engine so weights sync one to one."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: tuple[str, ...] = LORA_TARGETS

    def peft_config(self):
        from peft import LoraConfig

        return LoraConfig(
            r=self.r,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=list(self.target_modules),
            task_type="CAUSAL_LM",
        )


def lora_spec(config) -> LoraSpec | None:
    """The LoRA shape an experiment's ``train`` section asks for (None: full fine-tuning).

    Here, next to ``LoraSpec``, so engines, the learner and the runner all reach it without an
    import pointing upwards."""
    if config.train.finetune == "full":
        return None
    lora = config.train.lora
    return LoraSpec(
        r=lora.r, alpha=lora.alpha, dropout=lora.dropout, target_modules=tuple(lora.target_modules)
    )


def attach_adapters(model, lora: LoraSpec, adapters: list[str]):
    """Wrap ``model`` in peft with one LoRA adapter per name (lora_B = 0: starts as the base)."""
    from peft import get_peft_model

    peft_model = get_peft_model(model, lora.peft_config(), adapter_name=adapters[0])
    for name in adapters[1:]:
        peft_model.add_adapter(name, lora.peft_config())
    return peft_model
