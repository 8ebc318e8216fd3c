# SPDX-License-Identifier: Apache-2.0
"""`kvviz watch`: the KV-event stream read, recorded, rebuilt as a forest, followed live."""
