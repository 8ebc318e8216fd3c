# SPDX-License-Identifier: Apache-2.0
"""A stand-in for torchvision in kvviz's engine venv (scripts/install-engines.sh copies it there).

SGLang's and transformers' vision modules import names from torchvision when SGLang's cache
module is imported, but the KV caches kvviz drives never call them. torchvision's PyPI build
does not load beside the pinned CPU torch ("operator torchvision::nms does not exist"), so this
package answers every ``torchvision.*`` import with a module whose names are placeholders; a
placeholder that is *called* raises, so nothing can silently run on it.
"""

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+stand.in"


class _Placeholder:
    """Any name inside the stand-in: attribute access gives more placeholders; calling raises."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Placeholder(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self._name}: torchvision is a stand-in in this venv (kvviz's engine venv)")

    def __repr__(self) -> str:
        return f"<torchvision stand-in {self._name}>"


class _Module(types.ModuleType):
    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Placeholder(f"{self.__name__}.{attr}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves every ``torchvision.<sub>`` module as a :class:`_Module`."""

    def find_spec(self, fullname, path, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _Module(spec.name)

    def exec_module(self, module):
        module.__path__ = []


sys.meta_path.insert(0, _Finder())


def __getattr__(attr: str):
    if attr.startswith("__"):
        raise AttributeError(attr)
    return _Placeholder(f"{__name__}.{attr}")
