"""The Unix-socket front-end (sbctld.frontends.unix.server): the CLI's and the Python
client's way in, over the service layer (sbctld.service)."""
