"""Chapter 01: the two wirings, and a Post-LN encoder layer from nn.Linear modules."""

import math

import torch
import torch.nn.functional as F
from torch import nn


# Exercise 1.1 ------------------------------------------------------------------------------------------------------
def post_ln_forward(x, sublayers):
    for branch, norm in sublayers:
        x = norm(x + branch(x))  # Eq. 1: LN(x + F(x))
    return x


def pre_ln_forward(x, sublayers):
    for branch, norm in sublayers:
        x = x + branch(norm(x))  # Eq. 2: x + F(LN(x))
    return x


# Exercise 1.2 ------------------------------------------------------------------------------------------------------
class PostLNEncoderLayer(nn.Module):
    """Self-attention and FFN sub-layers, each LN(x + F(x)); no dropout, no padding mask."""

    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.q_proj, self.k_proj = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.v_proj, self.out_proj = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.fc1, self.fc2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.self_attn_layer_norm, self.final_layer_norm = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def attention(self, x):  # x: (batch, time, d_model)
        batch, time, d_model = x.shape
        q, k, v = (
            proj(x).view(batch, time, self.n_heads, self.d_head).transpose(1, 2)  # (batch, heads, time, d_head)
            for proj in (self.q_proj, self.k_proj, self.v_proj)
        )
        weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.d_head), dim=-1)  # (batch, heads, time, time)
        return self.out_proj((weights @ v).transpose(1, 2).reshape(batch, time, d_model))

    def forward(self, x):
        x = self.self_attn_layer_norm(x + self.attention(x))  # Eq. 1, self-attention
        return self.final_layer_norm(x + self.fc2(F.relu(self.fc1(x))))  # Eq. 1, FFN
