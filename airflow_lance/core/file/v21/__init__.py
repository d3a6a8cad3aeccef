"""Lance data file formats 2.1 and 2.2: structural page layouts and value compressions.

Shared container with 2.0 (footer, offset tables, FileDescriptor), but only
leaf columns exist and struct/list structure lives in repetition/definition
levels. Modules: ``util`` (byte helpers, codecs), ``bitpack`` (FastLanes),
``fsst``, ``blocks`` (decoded values -> Arrow), ``compression`` (compressive
encodings), ``structure`` (rep/def levels), ``pages`` (page layouts),
``read`` (field assembly) and ``write`` (the 2.1/2.2 writer's encodings).
"""
