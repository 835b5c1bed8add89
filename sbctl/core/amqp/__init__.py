"""The AMQP 1.0 codec shared by the daemon's AMQP front-end (sbctld.frontends.amqp) and the
lean client of ``sbctl bench --amqp`` (sbctl.amqp_client): the type system and
performatives (:mod:`.types`, :mod:`.generated`), encoding and decoding (:mod:`.codec`)
and framing (:mod:`.framing`). Sans-IO: bytes in, values out."""
