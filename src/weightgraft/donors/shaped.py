"""A donor whose change to the recipient is reshaped, one module at a time, never a whole model.

With the finetuning change `ΔW = W_donor - W_recipient` of each parameter, the shaped donor's
parameter is `W_recipient + scale * shape(ΔW)`, where shape is

- nothing (`rank=None, top=None`): a dose of the whole change (`scale` 0 is the recipient, 1 the
  donor, and any finite value in between or beyond);
- `rank=k`: the change truncated to its top-k singular directions, i.e. projected onto its first
  k singular vectors (from the eigenvectors of its Gram matrix in float64, computed once per
  matrix and shared by the variants of one donor, see `variant`);
- `top=n` (an int) or `top=f` (a float in (0, 1]): the change kept only in its n (or the fraction
  f) largest-magnitude entries, the others zero.

`rank` and `top` shape the 2-D weight matrices; vectors (biases, norm scales) carry `scale * Δ`
whole. The hooks never learn about any of this: a shaped module is the donor's module with its
parameters replaced. For a LoRA donor, `ΔW = scaling * B A`: the scale and rank shapes stay
factored (an r x r SVD), so they cost what the adapter costs; `top` builds the dense matrix.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from weightgraft.donors.lora import LoraDelta, LoraFactors, NoChange
from weightgraft.donors.sources import DonorSource, as_donor_source
from weightgraft.errors import UserError


class ShapeError(UserError, ValueError):
    """A shape of the weight change that cannot be applied (a rank or count too large, a scale
    that is not a finite number)."""


class ShapedDonor:
    """`donor` (a model, a checkpoint or adapter folder, a PeftModel or any DonorSource) with its
    change to the recipient shaped by `scale`, `rank` or `top` (see the module docstring).

    `recipient` is needed only to turn an adapter folder or PeftModel into a donor; the engine
    tells the source its recipient otherwise. Use it as any donor: `Grafter(recipient,
    ShapedDonor(donor, rank=4))`, or several shapes at once with `donors={...}`.
    """

    def __init__(
        self,
        donor: object,
        *,
        scale: float = 1.0,
        rank: int | None = None,
        top: int | float | None = None,
        recipient: nn.Module | None = None,
    ):
        self.scale, self.rank, self.top = check_shape(scale, rank, top)
        self.inner: DonorSource = donor if isinstance(donor, ShapedDonor) else as_donor_source(donor, recipient)
        if isinstance(self.inner, ShapedDonor):
            raise ShapeError("a ShapedDonor wraps an unshaped donor; use .variant(...) to change its shape")
        self.config = self.inner.config
        self._recipient: nn.Module | None = recipient
        self._svd: dict = {}  # matrix name -> its singular vectors (LoRA: path -> factored SVD)
        self._modules: dict[str, nn.Module] = {}

    def __repr__(self) -> str:
        return f"ShapedDonor({self.inner!r}, scale={self.scale}, rank={self.rank}, top={self.top})"

    def variant(
        self, *, scale: float | None = None, rank: int | None = None, top: int | float | None = None
    ) -> ShapedDonor:
        """The same donor with another shape; the singular value decompositions are shared."""
        other = copy.copy(self)
        other.scale, other.rank, other.top = check_shape(self.scale if scale is None else scale, rank, top)
        other._modules = {}
        return other

    # --- DonorSource ------------------------------------------------------------------------------
    def parameter_shapes(self) -> dict[str, torch.Size]:
        return self.inner.parameter_shapes()

    def check_against(self, recipient: nn.Module) -> None:
        self.inner.check_against(recipient)
        if self._recipient is not None and recipient is not self._recipient:
            self.release()
        self._recipient = recipient

    def module(self, path: str) -> nn.Module:
        if path not in self._modules:
            self._modules[path] = self._shaped(path)
        return self._modules[path]

    @contextmanager
    def running(self) -> Iterator[None]:
        with self.inner.running():
            yield

    def __getattr__(self, name: str):
        # changed_paths exists exactly when the wrapped donor has it (an adapter's targets).
        if name == "changed_paths" and "inner" in self.__dict__:
            return getattr(self.inner, name)
        raise AttributeError(name)

    def prefetch(self, paths) -> None:
        for path in paths:
            self.module(path)

    def release(self) -> None:
        self._modules.clear()
        self._svd.clear()
        if hasattr(self.inner, "release"):
            self.inner.release()

    # --- shaping ----------------------------------------------------------------------------------
    def _shaped(self, path: str) -> nn.Module:
        if self._recipient is None:
            raise RuntimeError("ShapedDonor.module() before check_against(recipient): use it through a Grafter")
        donor_module = self.inner.module(path)
        own = self._recipient.get_submodule(path)
        if isinstance(donor_module, NoChange):
            return donor_module  # no change, whatever its shape
        if isinstance(donor_module, LoraDelta) and self.top is None and not donor_module.embedding:
            return self._shaped_lora(path, donor_module)
        if isinstance(donor_module, LoraDelta):
            deltas = {"weight": _dense_lora(donor_module, own)}
            if donor_module.bias is not None:
                deltas["bias"] = donor_module.bias * donor_module.scaling
            template = own
        else:
            mine = dict(own.named_parameters())
            deltas = {name: _wide(p) - _wide(mine[name]) for name, p in donor_module.named_parameters()}
            template = donor_module
        shaped = _bare_copy(template)
        for name, param in list(shaped.named_parameters()):
            base = _wide(own.get_parameter(name))
            delta = deltas.get(name)
            value = base if delta is None else base + self.scale * self._shape(f"{path}.{name}", delta)
            owner, leaf = _owner(shaped, name)
            owner._parameters[leaf] = nn.Parameter(value.to(param.dtype), requires_grad=False)
        return shaped

    def _shape(self, name: str, delta: torch.Tensor) -> torch.Tensor:
        if delta.dim() < 2 or (self.rank is None and self.top is None):
            return delta
        if self.rank is not None:
            limit = min(delta.shape[-2:])
            if self.rank > limit:
                raise ShapeError(
                    f"rank {self.rank} is above the rank of {name} (a {delta.shape[0]} x {delta.shape[1]} matrix, "
                    f"at most {limit}); use rank <= {limit}, or rank=None for the whole change"
                )
            if name not in self._svd:
                self._svd[name] = _singular_vectors(delta)
            vectors, wide = self._svd[name][:, : self.rank], delta.double()
            if delta.shape[1] <= delta.shape[0]:  # right singular vectors: delta V_k V_k^T
                return ((wide @ vectors) @ vectors.T).to(delta.dtype)
            return (vectors @ (vectors.T @ wide)).to(delta.dtype)  # left ones: U_k U_k^T delta
        count = _top_count(self.top, delta.numel(), name)
        keep = torch.zeros(delta.numel(), dtype=torch.bool, device=delta.device)
        keep[delta.abs().reshape(-1).topk(count).indices] = True
        return torch.where(keep.view_as(delta), delta, torch.zeros_like(delta))

    def _shaped_lora(self, path: str, delta: LoraDelta) -> LoraDelta:
        """scale * rank-k(s B A), kept factored: QR of B and A^T, then an r x r SVD."""
        a, b = _wide(delta.A), _wide(delta.B)
        if self.rank is not None:
            limit = min(b.shape[0], a.shape[1])
            if self.rank > limit:
                raise ShapeError(
                    f"rank {self.rank} is above the rank of {path}.weight (a {b.shape[0]} x {a.shape[1]} matrix, "
                    f"at most {limit}); use rank <= {limit}, or rank=None for the whole change"
                )
            if path not in self._svd:
                q_b, r_b = torch.linalg.qr(b)
                q_a, r_a = torch.linalg.qr(a.T)
                u, s, vh = torch.linalg.svd(r_b @ r_a.T)
                self._svd[path] = (q_b @ u, s, vh @ q_a.T)
            u, s, vh = self._svd[path]
            k = min(self.rank, s.shape[0])
            b, a = u[:, :k] * s[:k], vh[:k]
        factors = LoraFactors(
            A=a.to(delta.A.dtype),
            B=b.to(delta.B.dtype),
            bias=delta.bias,
            scaling=delta.scaling * self.scale,
            embed_scale=delta.embed_scale,
        )
        return LoraDelta(factors, delta.A.device)


def check_shape(scale: object, rank: object, top: object) -> tuple[float, int | None, int | float | None]:
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise ShapeError(f"scale must be a finite number (below 0 and above 1 are allowed), not {scale!r}")
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 1):
        raise ShapeError(f"rank must be an int >= 1 (or None for the whole change), not {rank!r}")
    if top is not None:
        fraction = isinstance(top, float) and 0 < top <= 1
        count = isinstance(top, int) and not isinstance(top, bool) and top >= 1
        if not (fraction or count):
            raise ShapeError(f"top must be a count (an int >= 1) or a fraction (a float in (0, 1]), not {top!r}")
    if rank is not None and top is not None:
        raise ShapeError("give rank= or top=, not both (make two ShapedDonors to compare them)")
    return float(scale), rank, top


def _singular_vectors(delta: torch.Tensor) -> torch.Tensor:
    """The singular vectors of the matrix's shorter side, largest singular value first, in
    float64: eigenvectors of the Gram matrix (min side squared), many times faster on a CPU than
    a full SVD. The rank-k truncation is then the projection onto the first k of them (Eckart-Young),
    so U and S are never needed."""
    wide = delta.double()
    gram = wide.T @ wide if delta.shape[1] <= delta.shape[0] else wide @ wide.T
    _, vectors = torch.linalg.eigh(gram)
    return vectors.flip(-1)


def _top_count(top: int | float, size: int, name: str) -> int:
    if isinstance(top, float):
        return max(1, round(top * size))
    if top > size:
        raise ShapeError(f"top {top} is above the {size} entries of {name}; use top <= {size} or a fraction")
    return top


def _wide(t: torch.Tensor) -> torch.Tensor:
    """At least float32, so that the change and its shape are not rounded to half precision."""
    return t.detach().to(torch.promote_types(t.dtype, torch.float32))


def _dense_lora(delta: LoraDelta, own: nn.Module) -> torch.Tensor:
    """scaling * B A in the layout of the recipient module's weight."""
    matrix = delta.scaling * (_wide(delta.B) @ _wide(delta.A))  # [out, in]; embeddings: [dim, vocab]
    if delta.embedding or type(own).__name__ == "Conv1D":
        matrix = matrix.T
    return matrix


def _bare_copy(module: nn.Module) -> nn.Module:
    """A copy of a module without the hooks it may carry (the engine's, on the recipient's)."""
    clone = copy.deepcopy(module)
    for sub in clone.modules():
        sub._forward_hooks.clear()
        sub._forward_pre_hooks.clear()
    return clone


def _owner(module: nn.Module, name: str) -> tuple[nn.Module, str]:
    owner_path, _, leaf = name.rpartition(".")
    return (module.get_submodule(owner_path) if owner_path else module), leaf
