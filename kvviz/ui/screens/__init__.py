# SPDX-License-Identifier: Apache-2.0
"""The UI's modal screens: ``help_screen`` (keys and legend), ``prompt_screen`` (one line of
text: go to step, save as), ``branch_screen`` (branch, append or cancel an op typed while
stepped back)."""
