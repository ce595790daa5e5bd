"""Tests of the models: tokenizers, the wavelet front-end, Token Pooling, the zoo, FLOPs, external models."""
