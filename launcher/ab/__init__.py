"""`nemolaunch ab` and `tune`: configurations compared on one machine, interleaved, judged against measured noise."""
