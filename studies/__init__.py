"""The studies, the top floor: the leaderboard (:mod:`.leaderboard`), the robustness study
(:mod:`.robustness`), sim-to-real (:mod:`.sim2real`) and QMIX training's evaluation and report.
They import everything below; nothing in the product imports them."""
