"""The two neural architectures (definitions only: no training, no I/O), so an artifact can be
loaded for inference without importing the training code.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class QuantileLSTM(nn.Module):
    """Small LSTM over the look-back window with a two-quantile head on the *change*.

    Output [B, H, 2] in scaled units: (q50 change from the last value, q90 - q50 >= 0). The q90
    gap goes through softplus so the quantiles never cross.
    Tenant and pool ids index embeddings; id 0 is the shared 'unknown' row (trained by randomly
    masking ids, so unseen tenants get a sensible average rather than an untrained vector).
    """

    def __init__(
        self, *, n_seq: int, n_static: int, horizon: int, n_tenants: int, n_pools: int, hidden: int = 32
    ) -> None:
        super().__init__()
        self.horizon = horizon
        self.tenant_emb = nn.Embedding(n_tenants + 1, 4)
        self.pool_emb = nn.Embedding(n_pools + 1, 2)
        self.lstm = nn.LSTM(n_seq, hidden, batch_first=True)
        self.head = nn.Sequential(
            nn.Linear(hidden + n_static + 6, hidden), nn.GELU(), nn.Linear(hidden, horizon * 2)
        )
        # Start at persistence with a modest spread: the change head begins at 0.
        with torch.no_grad():
            last = self.head[-1]
            assert isinstance(last, nn.Linear)
            last.weight.mul_(0.1)
            last.bias.zero_()

    def forward(
        self, seq: torch.Tensor, static: torch.Tensor, tenant: torch.Tensor, pool: torch.Tensor
    ) -> torch.Tensor:
        _, (h, _) = self.lstm(seq)
        z = torch.cat([h[-1], static, self.tenant_emb(tenant), self.pool_emb(pool)], dim=1)
        out = self.head(z).view(-1, self.horizon, 2)
        q50 = out[..., 0]
        gap = nn.functional.softplus(out[..., 1] - 1.0)
        return torch.stack([q50, q50 + gap], dim=-1)


class MovingAverage(nn.Module):
    """DLinear/Autoformer series_decomp trend: moving average with replicate padding."""

    def __init__(self, kernel: int) -> None:
        super().__init__()
        self.kernel = kernel
        self.pool = nn.AvgPool1d(kernel, stride=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [B, N, L]
        pad = (self.kernel - 1) // 2
        b, n, length = x.shape
        flat = x.reshape(b * n, 1, length)
        front = flat[..., :1].expand(-1, -1, pad)
        back = flat[..., -1:].expand(-1, -1, pad)
        pooled: torch.Tensor = self.pool(torch.cat([front, flat, back], dim=-1))
        return pooled.reshape(b, n, length)


class OrgLinear(nn.Module):
    """OrgLinear as implemented by the paper's code (spec 3.2).

    Inputs: x [B, N, L] raw hourly peaks (no scaling, as in the paper), class ids [N, 3]
    (gpu-model/pool, cluster, org), time ids [B, 3] (workday, weekday, hour) at the origin.
    Output mu, sigma [B, H, N]. Deviation (spec 8 #11): the 1/sqrt(d) attention scale is applied
    inside the softmax, as recommended.
    """

    def __init__(
        self, *, lookback: int, horizon: int, class_dims: tuple[int, int, int], kernel: int = 25
    ) -> None:
        super().__init__()
        d, d_a = 8, 16
        self.decomp = MovingAverage(kernel)
        self.class_emb = nn.ModuleList([nn.Embedding(c, d) for c in class_dims])
        self.q = nn.Linear(d, d_a)
        self.k = nn.Linear(d, d_a)
        self.v = nn.Linear(d, d)
        self.time_emb = nn.ModuleList([nn.Embedding(c, d) for c in (2, 7, 24)])
        width = lookback + 3 * d + 3 * d
        self.lin_s = nn.Linear(width, horizon)
        self.lin_t = nn.Linear(width, horizon)
        self.lin_sigma = nn.Linear(width, horizon)
        for lin in (self.lin_s, self.lin_t, self.lin_sigma):
            nn.init.constant_(lin.weight, 1.0 / lookback)
        self.scale = 1.0 / math.sqrt(d_a)

    def forward(
        self, x: torch.Tensor, class_ids: torch.Tensor, time_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        b, n, _ = x.shape
        trend = self.decomp(x)
        seasonal = x - trend
        e = torch.stack([emb(class_ids[:, i]) for i, emb in enumerate(self.class_emb)], dim=1)  # [N,3,8]
        att = torch.softmax(self.q(e) @ self.k(e).transpose(1, 2) * self.scale, dim=-1)
        org = (att @ self.v(e)).reshape(n, -1)  # [N, 24]
        org = org.unsqueeze(0).expand(b, -1, -1)
        t = torch.cat([emb(time_ids[:, i]) for i, emb in enumerate(self.time_emb)], dim=1)  # [B, 24]
        t = t.unsqueeze(1).expand(-1, n, -1)
        mu = self.lin_s(torch.cat([seasonal, t, org], -1)) + self.lin_t(torch.cat([trend, t, org], -1))
        sigma = nn.functional.softplus(self.lin_sigma(torch.cat([x, t, org], -1))) + 1e-3
        return mu.transpose(1, 2), sigma.transpose(1, 2)
