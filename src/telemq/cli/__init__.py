"""`telemq ...`: thin command-line front ends over the public APIs."""
