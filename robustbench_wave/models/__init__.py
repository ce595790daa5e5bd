"""Models: the images-in, logits-out classifiers the harness trains and attacks.

This package owns the fixed front-ends (:mod:`.frontend`, :mod:`.wavelet`), automatic BPDA for any model
(:mod:`.autobpda`), the tokenizers and their registry (:mod:`.tokenizers`), Token Pooling (:mod:`.tokenpool`),
the ViT assembly on timm's ``VisionTransformer`` with ``@register_model`` variants (:mod:`.vit`), the
declarative zoo of ``models/*.toml`` specs (:mod:`.zoo`), the analytic compute count (:mod:`.flops`) and
models from outside the zoo (:mod:`.external`: a Python factory or a timm architecture with safetensors
weights). To add a tokenizer, write its class in :mod:`.tokenizers` and register it with
``@register_tokenizer``; to add a model, add a TOML file to ``models/``.
"""
