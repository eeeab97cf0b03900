// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

/// @dev The one EIP-3009 function a batching relayer needs (USDC's packed-signature overload).
interface IEIP3009 {
    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external;
}

/**
 * @title BatchSettle
 * @notice Settles several EIP-3009 authorizations in ONE transaction, the way a batching
 * facilitator or a multicall does. x402srv's tests use it to check that each challenge is
 * matched by its own authorization's AuthorizationUsed/Transfer, not by the transaction hash.
 *
 * Anyone may call it: an authorization is only as good as its signature, which the token
 * checks. One failing authorization reverts the whole batch.
 */
contract BatchSettle {
    struct Authorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
        bytes signature;
    }

    function settleAll(address token, Authorization[] calldata authorizations) external {
        for (uint256 i = 0; i < authorizations.length; i++) {
            Authorization calldata a = authorizations[i];
            IEIP3009(token).transferWithAuthorization(
                a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce, a.signature
            );
        }
    }
}
