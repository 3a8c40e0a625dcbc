"""Shift: does new traffic look like the calibration data, and what can still be certified.

Modules (see ``docs/deployment.md``, section 6):

- ``features``: the cheap feature view (score, lengths, TF-IDF + SVD, optional hidden state);
- ``detect``: ``two_sample_test`` (domain AUROC, permutation p-value, drivers, density ratios);
- ``certify``: ``weighted_rates``, ``kish_ess``, ``shift_certificate`` (rejection sampling +
  Learn-then-Test, or an abstention with the labels needed);
- ``label_plan``: ``plan_labels``, the one label plan of a target on new traffic (the review
  planner's, :func:`calimon.studies.shift.live_plan.plan`, before any label);
- ``sides``: the transcripts of a run's calibration rows and of a new set;
- ``verdict``: ``shift_verdict`` (no shift / shift, certificate holds / shift breaks the
  certificate, from the score tail and the weighted FAR, no labels needed);
- ``verdict_mr``: ``mr_verdict`` (the same for MR targets, with its assumptions checked, or
  not judged without labels);
- ``check``: ``shift_check``, ``check_line``, ``shift_thresholds``;
- ``recertify``: audit slices and the stratified FAR / MR bounds on reviewed traffic;
- ``labels``: reading reviewer label files; ``recert_run``: ``recertify_files``.
"""
