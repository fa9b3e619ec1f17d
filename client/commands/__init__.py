"""The commands of ``http-timing``: argparse, call the layers below, print."""
