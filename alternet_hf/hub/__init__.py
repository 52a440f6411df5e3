"""What goes to the Hub and what comes from elsewhere: model repos and their cards (`repos`), the reference code's
released files (`reference`) and their conversion to the zoo's models (`convert`)."""
