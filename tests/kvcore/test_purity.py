# SPDX-License-Identifier: Apache-2.0
"""kvcore imports only the standard library; kvviz's model never imports textual."""

from tests.imported import foreign_modules_after, top_level_modules_after


def test_kvcore_imports_only_the_standard_library():
    imports = "import kvcore, kvcore.events, kvcore.invariants, kvcore.incremental, kvcore.rows, kvcore.state_digest"
    top = top_level_modules_after(imports)
    foreign = foreign_modules_after(imports) - {"kvcore"}
    assert foreign == set()
    assert "textual" not in top and "rich" not in top and "kvviz" not in top
