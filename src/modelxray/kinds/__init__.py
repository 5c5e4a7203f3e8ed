"""Model kinds: one module per kind (causal LMs, classifiers, encoders, seq2seq models, speech
recognisers, audio classifiers, vision and vision-language models, any module), each saying how it
loads, what data it reads and how it is scored; ``table`` lists them in the order a model's config
is matched against them. Adding one: docs/new_kind.md."""
