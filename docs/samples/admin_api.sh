ADMIN="${X402SRV_ADMIN_API:-http://127.0.0.1:8403/admin/api}"
AUTH="Authorization: Bearer $X402SRV_ADMIN_TOKEN"
curl -sf -H "$AUTH" "$ADMIN/overview?bucket=hour"            # revenue, funnel, settler health
curl -sf -H "$AUTH" "$ADMIN/purchases?q=$PAYER"              # a buyer's purchases, newest first
curl -sf -H "$AUTH" "$ADMIN/purchases/$CHALLENGE"            # one, with its history
curl -sf -H "$AUTH" -X POST -d '{"reason": "chargeback"}' "$ADMIN/grants/$CHALLENGE/revoke"
curl -sf -H "$AUTH" "$ADMIN/reconciler"                      # last pass, anything unresolved
