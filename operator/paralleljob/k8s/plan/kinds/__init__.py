"""One interface per kind of gang: the lifecycle driver asks a job's :class:`~.base.Gang`, never its fields.

A gang is three answers, each from a small module of its own, read from its parsed request and record by the
one picker (``picker.kind_of``, ``sizings.sizing_of``, ``gangs.layout_of``; ``gangs.gang_of`` composes them).
A step asks only for what it needs (admission its sizing, a move its layout); the job's step in the pass
(``jobdecision.decide_job``) picks the whole gang once and hands it to the layout's and the kind's methods:

- its kind, who makes the pods: a ParallelJob's own (``operated``), an adopted pod group's (``adopted``: an
  Indexed Job, JobSet or PyTorchJob), a native PodGroup's (``native``);
- its layout, what one pod holds: a TP group on an HGX node (``hgx``), or a whole NVL72 tray (``nvl72``, its
  repair in ``trayrepair``);
- its sizing: rigid (``rigid``) or elastic (``elasticity``, its records in ``resizing``, its admission in
  ``elastic_admission``).

Why composed, not one class per combination: a tray breaks the same way under a ParallelJob's pod as under a
JobSet's, and a JobSet's pods are another controller's whether they hold a tray or a TP group. A pod group on
trays is therefore the adopted kind with the tray layout, not a kind of its own: its failure detection and
repair are the tray layout's (held to its clique, since its pods name that clique's channel template), and
what may be done to its pods is the pod group's. An elastic job is a ParallelJob with elastic sizing. What a
combination cannot do is refused where it is chosen, with a reason: the parse refuses an elastic pod group
(its size is its controller's), and elastic sizing never takes trays (``picker.may_take_trays``), so an elastic
job is placed on HGX nodes.

The package imports nothing here, so a driver module may import one kind module without loading the others.
"""
