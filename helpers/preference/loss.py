"""The Bradley–Terry loss, its symmetrised form, and the position-free probability.

With a score s(x, y) the probability that y_a beats y_b is sigma(Delta), Delta = s(x, y_a) -
s(x, y_b). Here a score is read while the model sees the whole pair, so Delta depends on the
order the pair was shown in: Delta(x, a, b) need not equal -Delta(x, b, a). Their gap is the
position bias, and these functions are where it is trained away and averaged out.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def bt_loss(delta: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """-[r log sigma(Delta) + (1 - r) log(1 - sigma(Delta))], averaged (r = 1: y_a preferred).

    Written with logsigmoid: log(1 - sigma(x)) = logsigmoid(-x), exact for large |Delta|.
    """
    r = r.to(delta.dtype)
    return -(r * F.logsigmoid(delta) + (1 - r) * F.logsigmoid(-delta)).mean()


def symmetrised_loss(delta_ab: torch.Tensor, delta_ba: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """L_sym = 1/2 l(x, y_a, y_b, r) + 1/2 l(x, y_b, y_a, 1 - r): every pair in both orders."""
    return 0.5 * bt_loss(delta_ab, r) + 0.5 * bt_loss(delta_ba, 1 - r.to(delta_ba.dtype))


def position_free_probability(delta_ab: torch.Tensor, delta_ba: torch.Tensor) -> torch.Tensor:
    """P-bar = sigma(1/2 [Delta(x, a, b) - Delta(x, b, a)]): the two orders averaged."""
    return torch.sigmoid(0.5 * (delta_ab - delta_ba))


def position_bias(delta_ab: torch.Tensor, delta_ba: torch.Tensor) -> torch.Tensor:
    """P(a, b) + P(b, a) - 1 per pair, with P = sigma(Delta) read in one order only.

    0 for a model that ignores the order; > 0 when it favours the first slot, < 0 the second.
    (P-bar itself always sums to 1 over both orders: averaging is what removes the bias.)
    """
    return torch.sigmoid(delta_ab) + torch.sigmoid(delta_ba) - 1
